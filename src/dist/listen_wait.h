// Waiting for rank 0's store to listen, before c10d connects to it. c10d 1.13
// connects with a timeout of whole seconds (0.5 s becomes 0 s: it gives up at
// once) and says nothing while it retries; this wait keeps the exact timeout
// and lets the caller report progress.
#pragma once
#include <functional>
#include <string>

#include "ddp/dist/types.h"

namespace ddp::detail {

// Tries TCP connections to host:port until one is accepted ("") or `timeout` has
// passed (why the last try failed: the name does not resolve, connections are refused,
// nothing answers). Calls report(elapsed, why) after 5 s (or `interval` if shorter), then every `interval`.
std::string wait_until_listening(const std::string& host, int port, Milliseconds timeout, Milliseconds interval,
                                 const std::function<void(Milliseconds, const std::string&)>& report);

}  // namespace ddp::detail
