// A handle to an operation in flight. Every collective returns one.
//
//   ddp::Work w = group->all_reduce(t, opts);   // opts.async_op = true
//   ... overlap other work ...
//   w.wait();                                    // t now holds the result
//
// Errors raised on the backend's threads are rethrown by wait().
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "ddp/dist/types.h"

namespace ddp {

class Work {
 public:
  // What a backend implements.
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool is_completed() = 0;
    // Blocks until done or timeout (kNoTimeout: forever); throws ddp errors.
    virtual void wait(Milliseconds timeout) = 0;
  };

  Work();  // an already completed operation
  explicit Work(std::shared_ptr<Impl> impl);
  static Work completed() { return Work(); }

  // True once the operation finished (successfully or not). Runs pending
  // continuations when it first observes completion.
  bool is_completed();
  // Waits for the result; rethrows the operation's error. kNoTimeout waits
  // forever; a timeout throws ddp::TimeoutError.
  void wait(Milliseconds timeout = kNoTimeout);
  // Adds a step run once after completion, on the thread that observes it
  // (wait / is_completed). Used for post-processing such as AVG's division.
  Work& then(std::function<void()> fn);

 private:
  struct State;
  void finish_locked(State& s);
  std::shared_ptr<State> state_;
};

// Waits for all, rethrowing the first error after every one has finished.
void wait_all(std::vector<Work>& works, Milliseconds timeout = kNoTimeout);
// One Work that completes when all of `works` have.
Work combine(std::vector<Work> works);

}  // namespace ddp
