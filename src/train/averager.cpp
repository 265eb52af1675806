#include "averager.h"

namespace ddp::train::detail {

Averager::Averager(const WeightAverage& spec, int64_t every, torch::nn::Module& model, const at::Device& device)
    : spec_(spec), every_(every) {
  if (!wanted(spec, every)) return;
  shadow_ = spec.make_shadow();
  shadow_.ptr()->to(device);
  ema_ = std::make_unique<ModelEma>(shadow_.ptr(), spec.rho);
  ema_->copy_from(model);
}

void Averager::after_step(torch::nn::Module& model, int64_t step, int64_t total) {
  if (!ema_) return;
  if (step % every_ == 0) {
    if (!spec_.lookahead) return ema_->update(model);
    ema_->update(model, spec_.lookahead(step, total));
    ema_->copy_to(model);
  }
  if (spec_.lookahead && step == total) ema_->copy_to(model);  // the run ends on the average
}

torch::nn::AnyModule& Averager::evaluated(torch::nn::AnyModule& model) {
  return ema_ && !spec_.lookahead ? shadow_ : model;
}

}  // namespace ddp::train::detail
