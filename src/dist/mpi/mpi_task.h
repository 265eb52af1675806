// One operation of the mpi backend: queued by the caller's thread, run by the
// communication thread (see mpi_runtime.h), waited on through a Work.
//
// A task is either blocking (a collective: `run` returns once MPI returned) or
// a request (send/recv: `run` leaves `request` set, the communication thread
// polls it and calls `on_request_done` when it completes).
#pragma once
#include "dist/mpi/mpi_c.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "ddp/dist/work.h"
#include "dist/error_context.h"

namespace ddp::mpi {

using Clock = std::chrono::steady_clock;

class Task {
 public:
  // `timeout`: the operation's own limit (the call's, else the group's);
  // kNoTimeout or 0: none. It runs from when the task is queued.
  Task(ErrorContext ctx, Milliseconds timeout, std::function<void(Task&)> run);

  const ErrorContext ctx;
  const Milliseconds timeout;
  const Clock::time_point queued_at;
  const Clock::time_point deadline;  // Clock::time_point::max() when none

  // Runs on the communication thread; throws on failure.
  std::function<void(Task&)> run;
  // Request-style tasks: set by `run`; polled until complete.
  MPI_Request request = MPI_REQUEST_NULL;
  std::function<void(const MPI_Status&)> on_request_done;  // may throw
  bool cancel_sent = false;                                // communication thread only: MPI_Cancel was called
  // A blocking collective that may run on a waiting caller's thread.
  bool may_run_inline = false;

  bool has_deadline() const { return deadline != Clock::time_point::max(); }
  bool overdue(Clock::time_point now) const { return now >= deadline; }

  // Marks the task done (error: null on success) and wakes its waiters.
  void complete(std::exception_ptr error);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until done, the wait's timeout (when > 0) or the task's deadline;
  // throws TimeoutError on expiry (the task goes on: a later wait may still
  // succeed; requests are cancelled at the deadline), else rethrows the
  // task's error.
  void wait(Milliseconds wait_timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

using TaskPtr = std::shared_ptr<Task>;

// The Work::Impl handed to users.
class Runtime;

// The Work::Impl handed to users. Waiting on a task still first in the queue
// of an idle runtime runs it on the waiting thread (see Runtime).
class TaskWork final : public Work::Impl {
 public:
  TaskWork(TaskPtr task, Runtime* rt) : task_(std::move(task)), rt_(rt) {}
  // Done, or past its deadline (wait() then throws TimeoutError).
  bool is_completed() override;
  void wait(Milliseconds timeout) override;

 private:
  TaskPtr task_;
  Runtime* rt_;
};

}  // namespace ddp::mpi
