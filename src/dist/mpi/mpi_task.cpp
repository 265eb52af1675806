#include "dist/mpi/mpi_task.h"

#include "dist/mpi/mpi_runtime.h"

#include <algorithm>
#include <string>

namespace ddp::mpi {
namespace {

Clock::time_point deadline_after(Clock::time_point start, Milliseconds timeout) {
  if (timeout.count() <= 0) return Clock::time_point::max();
  return start + timeout;
}

}  // namespace

Task::Task(ErrorContext c, Milliseconds t, std::function<void(Task&)> r)
    : ctx(std::move(c)),
      timeout(t),
      queued_at(Clock::now()),
      deadline(deadline_after(queued_at, t)),
      run(std::move(r)) {}

void Task::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Task::wait(Milliseconds wait_timeout) {
  if (!done()) {
    // The earlier of the wait's own limit and the operation's deadline.
    Clock::time_point until = deadline;
    Milliseconds reported = timeout;
    if (wait_timeout.count() > 0) {
      Clock::time_point mine = Clock::now() + wait_timeout;
      if (mine < until) {
        until = mine;
        reported = wait_timeout;
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto is_done = [this] { return done_.load(std::memory_order_acquire); };
    if (until == Clock::time_point::max()) {
      cv_.wait(lock, is_done);
    } else if (!cv_.wait_until(lock, until, is_done)) {
      throw TimeoutError(ctx.prefix() + "timed out after " + std::to_string(reported.count()) + " ms");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void TaskWork::wait(Milliseconds timeout) {
  if (rt_ && task_->may_run_inline && !task_->done()) rt_->try_run_inline(task_, /*queued=*/true);
  task_->wait(timeout);
}

bool TaskWork::is_completed() { return task_->done() || task_->overdue(Clock::now()); }

}  // namespace ddp::mpi
