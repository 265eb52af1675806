// A handle to an operation in flight and the tensor it produces: every
// collective returns one, and so does a DDP comm hook.
//
//   ddp::Work w = group->all_reduce(t, opts);   // opts.async_op = true
//   ... overlap other work ...
//   at::Tensor r = w.value();                    // waits; r is t, now reduced
//   ddp::Work half = w.then([](at::Tensor v) { return v / 2; });   // a continuation
//
// A synchronous call (async_op = false) returns a Work that is already
// complete: wait() and value() return at once. Errors raised on a backend's
// threads are rethrown by wait() and value().
//
// Continuations (then) of a collective's Work run by themselves as soon as it
// completes, on its group's sequencer thread, in the order then() was called;
// collectives they call keep their place in the group's order (see
// src/dist/sequencer.h). Continuations of other Works run once, on the thread
// that first waits after completion. Never under a lock: they may use their
// own Work.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "ddp/dist/types.h"

namespace ddp {

namespace detail {
class Sequencer;
}

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

  Work();  // an already completed operation without a value
  explicit Work(std::shared_ptr<Impl> impl);
  // An already completed operation whose value is `value`.
  static Work ready(at::Tensor value);

  // True once the operation finished, successfully or not: wait() then returns
  // or throws without blocking on communication. Never blocks; runs nothing.
  bool is_completed();
  // Waits for the operation and its continuations; rethrows the first error.
  // kNoTimeout waits forever; a timeout throws ddp::TimeoutError (the
  // operation goes on, and a later wait may succeed).
  void wait(Milliseconds timeout = kNoTimeout);
  // wait(), then the tensor the operation produced (undefined if none).
  at::Tensor value(Milliseconds timeout = kNoTimeout);

  // A Work that completes after this one, with value fn(value()).
  Work then(std::function<at::Tensor(at::Tensor)> fn);
  // For whoever makes the Work: the value it yields, and a step run after a
  // successful completion, before any waiter returns (e.g. AVG's division).
  Work& set_value(at::Tensor value);
  Work& on_success(std::function<void()> step);
  // For the front: then() on this Work queues its continuation on `sequencer` (its group's).
  Work& bind(const std::shared_ptr<detail::Sequencer>& sequencer);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Waits for all, rethrowing the first error after every one has finished.
void wait_all(std::vector<Work>& works, Milliseconds timeout = kNoTimeout);
// One Work that completes when all of `works` have.
Work combine(std::vector<Work> works);

}  // namespace ddp
