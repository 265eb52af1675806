// Engines let go at exit while their device can still be reached (nccl's communicators): a live group's abort
// runs in an atexit handler, before the static destructors.
//
// Why: CUDA's runtime shuts down in an atexit handler of its own, registered when it starts. Whatever outlives
// main() and was made before that (the default group init_process_group keeps, a group a gtest factory holds) is
// destroyed after it; c10d's ProcessGroupNCCL destructor then aborts its communicators on a CUDA runtime that is
// gone ("driver shutting down"), throws out of a destructor, and the process ends in SIGABRT (exit 134) after its
// work passed. PyTorch's Python never meets this: its groups die with the interpreter, before C's atexit handlers.
//
// ProcessGroup arms one entry per group after its first call was issued, failed or not (the device is in use then,
// so CUDA's handler was registered first and runs after ours); the entry is dropped when the group is destroyed in
// order. An abort does not flush: what a rank left running on its GPU is dropped, as c10d's destructor would.
#pragma once
#include <atomic>
#include <functional>

namespace ddp::detail {

class ExitAbort {
 public:
  explicit ExitAbort(std::function<void()> abort) : abort_(std::move(abort)) {}
  ~ExitAbort();  // drops the entry; waits if the exit handler is running it
  ExitAbort(const ExitAbort&) = delete;
  ExitAbort& operator=(const ExitAbort&) = delete;

  // Adds the entry once (later calls return at once) and registers the exit handler for it (the latest runs first).
  void arm();

 private:
  friend void run_exit_aborts();
  const std::function<void()> abort_;
  std::atomic<bool> armed_{false};
};

// Runs every armed entry's abort now, once (what the exit handler does); errors are said on stderr, not thrown.
void run_exit_aborts();

}  // namespace ddp::detail
