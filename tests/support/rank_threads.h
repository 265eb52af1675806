// Runs N ranks as threads of this process, each holding its own group of one
// backend, all meeting on one in-memory store (c10d HashStore).
#pragma once
#include <functional>
#include <string>

#include "ddp/dist.h"

namespace ddp::testing {

// Creates a group per rank and calls fn on each, in parallel; backend "nccl-standin" is nccl's contract over
// gloo (nccl_standin.h). Exceptions on
// any rank become test failures naming the rank. Groups time out after
// `timeout` so that a broken test fails instead of hanging.
void run_ranks(const std::string& backend, int world, const std::function<void(ProcessGroup&)>& fn,
               Milliseconds timeout = std::chrono::seconds(30));

}  // namespace ddp::testing
