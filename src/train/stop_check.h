// Whether any rank asked to stop (SIGTERM: preemption), or rank 0's background checkpoint write failed, agreed by
// every rank at the same step without a blocking collective. On a check step a MAX all_reduce of {signal, -proposed
// interval, write failed, ranks waiting to join} starts before the step
// and is read after it, while the step computes. On a GPU its result is copied to pinned memory right behind it,
// before the step's work, so the read after the step waits for that copy only, not for the step. Checks are spaced so
// they cost little: each rank proposes the number of its steps that take about `target_s` (measured since the last
// check), the smallest proposal wins (MAX of the negatives), so a stop is seen within about target_s plus one step.
// ddp-bench ddp --pair --guards measures what it costs.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

#include "ddp/dist/collectives.h"
#include "ddp/dist/device.h"
#include "ddp/dist/process_group.h"
#include "dist/host_memory.h"
#include "dist/pending_read.h"

namespace ddp::train::detail {

class StopSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StopSchedule(ProcessGroup& group, double target_s = 0.2, int64_t max_interval = 64)
      : group_(group), target_s_(target_s), max_interval_(max_interval) {}

  // Before step `step` (every rank calls it for the same steps, in order): on a check step, starts the check.
  void begin(int64_t step, int local_signal, bool save_failed = false, int64_t joiners = 0) {
    if (!due(step)) return;
    const auto now = Clock::now();
    int64_t propose = 1;
    if (last_step_ >= 0 && step > last_step_) {
      const double per_step = std::chrono::duration<double>(now - last_time_).count() / double(step - last_step_);
      propose = per_step > 0 ? int64_t(target_s_ / per_step) : max_interval_;
      propose = std::clamp<int64_t>(propose, 1, max_interval_);
    }
    last_step_ = step;
    last_time_ = now;
    // On the group's device (a GPU's for nccl): queued from pinned memory without waiting for the GPU's work.
    const at::Tensor host = at::tensor({int64_t(local_signal), -propose, int64_t(save_failed), joiners}, at::kLong);
    flag_ = control_tensor(host, group_.device());
    AllReduceOptions o = op(ReduceOp::MAX);
    o.async_op = true;
    work_ = group_.all_reduce(flag_, o);
    if (host_reads_wait(flag_.device())) {  // a GPU: the result's copy queued now, before the step's work
      work_->wait();                        // nccl's: the stream waits, not the host
      work_.reset();
      read_ = ddp::detail::PendingRead(flag_);
    }
  }

  // Whether step `step` is a check step: what begin() sends is only read then (a store read for joiners costs
  // a round trip: ask it only when due).
  bool due(int64_t step) const { return next_ < 0 || step >= next_; }

  // After the step begun last: true when some rank asked to stop (known on check steps; false between them).
  bool requested() {
    at::Tensor flags;
    if (read_.valid()) {  // a GPU's: waits for the all_reduce and the copy only, not for the step queued after them
      flags = read_.get();
      read_ = ddp::detail::PendingRead();
    } else {
      if (!work_) return false;
      work_->wait();
      work_.reset();
      flags = host_copy(flag_);  // the CPU's: no copy at all
    }
    const int64_t* f = ddp::detail::host_data<int64_t>(flags, "the stop check's flags");
    next_ = last_step_ + std::max<int64_t>(1, -f[1]);
    save_failed_ = f[2] != 0;
    joiners_ = f[3];
    signal_ = static_cast<int>(f[0]);
    return f[0] != 0;
  }

  // The signal the ranks stop for: the largest number any rank got (SIGTERM's 15 over SIGUSR1's 10 and SIGUSR2's
  // 12: a preemption wins over a time limit's warning).
  int signal() const { return signal_; }

  // Whether the last check read by requested() found rank 0's background checkpoint write failed.
  bool save_failed() const { return save_failed_; }

  // Whether the last check read found ranks waiting to join (rank 0 read the store: in-place recovery).
  bool joiners_waiting() const { return joiners_ > 0; }

  // The check in flight, if any, for a step begun but not finished: waited so the ranks stay in step.
  void drain() {
    if (work_) work_->wait();
    work_.reset();
    read_ = ddp::detail::PendingRead();
  }

  // The agreed steps between checks (1 until the first check has been read).
  int64_t interval() const { return next_ < 0 ? 1 : next_ - last_step_; }

 private:
  ProcessGroup& group_;
  double target_s_;
  int64_t max_interval_;
  int64_t next_ = -1;       // the next check step (-1: the first step begun)
  int64_t last_step_ = -1;  // the last check step
  Clock::time_point last_time_;
  bool save_failed_ = false;
  int64_t joiners_ = 0;
  int signal_ = 0;
  at::Tensor flag_;
  std::optional<Work> work_;
  ddp::detail::PendingRead read_;  // a GPU's check in flight: its result on the way to pinned memory
};

}  // namespace ddp::train::detail
