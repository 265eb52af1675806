#include "learning_rates.h"

#include "ddp/errors.h"

namespace ddp::train::detail {

LearningRates::LearningRates(LrSchedule schedule, torch::optim::Optimizer& opt, std::vector<int64_t> train_epochs,
                             double logged)
    : schedule_(std::move(schedule)), train_epochs_(std::move(train_epochs)), logged_(logged) {
  for (auto& g : opt.param_groups()) base_.push_back(g.options().get_lr());
  if (base_.empty()) throw InvalidArgument("Trainer: the optimizer has no parameter groups");
  train_epochs_.resize(base_.size(), 0);
}

void LearningRates::set_steps(int64_t steps_per_epoch, int64_t total_steps) {
  steps_per_epoch_ = steps_per_epoch;
  total_steps_ = total_steps;
}

double LearningRates::apply(torch::optim::Optimizer& opt, int64_t step) const {
  const double m = schedule_(step, total_steps_);
  const int64_t epoch = step / steps_per_epoch_;
  auto& groups = opt.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool frozen = train_epochs_[i] > 0 && epoch >= train_epochs_[i];
    groups[i].options().set_lr(frozen ? 0.0 : base_[i] * m);
  }
  return logged_ * m;
}

void LearningRates::scale(double factor) {
  for (double& b : base_) b *= factor;
  logged_ *= factor;
}

}  // namespace ddp::train::detail
