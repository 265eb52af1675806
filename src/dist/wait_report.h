// Synchronous collectives in progress, so that a watcher (the heartbeat
// monitor, heartbeat.h) can say what a rank has been waiting for: op,
// sequence number, bytes, time waited.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/backend_impl.h"

namespace ddp::detail {

struct PendingWait {
  int64_t id = 0;      // unique per wait
  std::string prefix;  // "[gloo] rank 0/4 all_reduce: "
  int64_t seq = 0;     // 0: a send or recv, or a collective queued behind continuations (not numbered yet)
  bool p2p = false;
  int64_t bytes = 0;
  Milliseconds timeout;  // kNoTimeout: none
  std::chrono::steady_clock::time_point start;
};

// Registers c as waited for, for the scope's lifetime.
class WaitScope {
 public:
  explicit WaitScope(const Call& c);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  int64_t id_;
};

// The waits in progress in this process.
std::vector<PendingWait> pending_waits();

// Seconds with up to 3 significant decimals, never rounded to 0: 0.5, 2, 1.25, 600.
std::string format_seconds(double s);
// "4.0 MiB", "8 B".
std::string format_bytes(int64_t b);

}  // namespace ddp::detail
