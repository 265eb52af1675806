// The Trainer's learning rates: each optimizer group's lr at a step is its lr at creation times the
// schedule's multiplier, and 0 once a group is past its ParamGroup::train_epochs.
#pragma once
#include <torch/optim/optimizer.h>

#include <vector>

#include "ddp/train/schedule.h"

namespace ddp::train::detail {

class LearningRates {
 public:
  LearningRates() = default;
  // `opt`'s groups as created; train_epochs[i] for group i (0: always trained; empty: all 0); `logged`: the lr
  // the logs show at multiplier 1 (settings.lr).
  LearningRates(LrSchedule schedule, torch::optim::Optimizer& opt, std::vector<int64_t> train_epochs, double logged);
  void set_steps(int64_t steps_per_epoch, int64_t total_steps);
  // Every group's base learning rate (and the logged one) times `factor` (an on_world_change policy).
  void scale(double factor);

  // Sets every group's lr for `step`; returns the logged lr.
  double apply(torch::optim::Optimizer& opt, int64_t step) const;
  const LrSchedule& schedule() const { return schedule_; }

 private:
  LrSchedule schedule_ = LrSchedule::constant();
  std::vector<double> base_;
  std::vector<int64_t> train_epochs_;
  double logged_ = 0;
  int64_t steps_per_epoch_ = 1, total_steps_ = 1;
};

}  // namespace ddp::train::detail
