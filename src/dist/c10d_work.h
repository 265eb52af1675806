// Wraps a c10d Work (gloo's, NCCL's) in ddp's Work, turning c10d exceptions into
// ddp::CommError / ddp::TimeoutError prefixed with backend, rank and op.
#pragma once
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>
#include <memory>

#include "ddp/dist/work.h"
#include "dist/error_context.h"

namespace ddp::c10d_work {

// What a group's works share. `broken` is set when a wait ended on an operation still running: its gloo worker
// thread may stay blocked until the group's own timeout, so the group must not join it. `given_up`
// (BackendOptions::given_up) says the members gave the group up: a slow wait asks it between slices.
struct Health {
  std::atomic<bool> broken{false};
  std::function<bool()> given_up;
  // given_up's answer (true where it cannot be asked: the store is gone).
  bool given_up_now() const;
  // Whether the group must be let go without joining its workers: broken, or given up.
  bool abandoned() const;
};
using HealthPtr = std::shared_ptr<Health>;

// on_stream: wait() orders the caller's CUDA stream after the work and returns (NCCL's work, as PyTorch's
// wait()); the group's own timeout (c10d's watchdog) bounds it. Otherwise wait() blocks until done or `timeout`.
Work wrap(const ErrorContext& ctx, c10::intrusive_ptr<c10d::Work> work, HealthPtr health, bool on_stream = false);
// Runs `fn` (a c10d call that may throw synchronously) and maps its errors.
template <typename Fn>
Work call(const ErrorContext& ctx, const HealthPtr& health, Fn&& fn, bool on_stream = false);

// ddp's reduction as c10d's, name for name (a backend without one of them maps it first).
c10d::ReduceOp to_c10d(ReduceOp op);

// The message of the current exception, without c10's backtrace.
std::string current_message();
[[noreturn]] void rethrow_mapped(const ErrorContext& ctx, Milliseconds timeout);

template <typename Fn>
Work call(const ErrorContext& ctx, const HealthPtr& health, Fn&& fn, bool on_stream) {
  try {
    return wrap(ctx, fn(), health, on_stream);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (...) {
    rethrow_mapped(ctx, Milliseconds(0));
  }
}

}  // namespace ddp::c10d_work
