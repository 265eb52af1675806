// --strategy ddp: DistributedDataParallel and the optimizer on every rank, each
// holding the whole optimizer state (PyTorch's DDP).
#include "ddp.h"

#include "ddp/parallel/clip_grad.h"
#include "ddp/parallel/optimizer_state.h"
#include "train/finite_check.h"

namespace ddp::train::detail {

DdpStrategy::DdpStrategy(StrategyParts parts) {
  DDPOptions options;
  options.group = parts.group;
  model_ = std::make_unique<DistributedDataParallel<Net>>(Net{parts.model}, options);  // rank 0's weights
  if (parts.hook) model_->register_comm_hook(parts.hook);
  group_ = parts.group;
  make_optimizer_ = std::move(parts.make_optimizer);
}

void DdpStrategy::build_optimizer() { opt_ = make_optimizer_(); }

at::Tensor DdpStrategy::forward(const at::Tensor& x) { return (*model_)(x); }

std::shared_ptr<void> DdpStrategy::no_sync() {
  return std::make_shared<DistributedDataParallelBase::NoSyncGuard>(*model_);
}

const DDPStats& DdpStrategy::stats() const { return model_->stats(); }
torch::optim::Optimizer& DdpStrategy::optimizer() { return *opt_; }
void DdpStrategy::zero_grad() { opt_->zero_grad(); }
void DdpStrategy::step() { opt_->step(); }

c10::IValue DdpStrategy::optimizer_state() { return group_->rank() == 0 ? optimizer_state_dict(*opt_) : c10::IValue(); }
void DdpStrategy::load_optimizer_state(const c10::IValue& full) { load_optimizer_state_dict(*opt_, full); }
int64_t DdpStrategy::optimizer_state_bytes() const { return ddp::optimizer_state_bytes(*opt_); }

// The reduced gradients are the same on every rank: each checks its own.
std::optional<std::string> DdpStrategy::non_finite_gradient() {
  const torch::nn::Module& m = *model_->module().ptr();
  if (gradients_finite(m)) return std::nullopt;
  return first_non_finite(m, /*gradients=*/true);
}

GradientSums DdpStrategy::gradient_sums() { return sum_gradients(model_->module().ptr()->named_parameters()); }

at::Tensor DdpStrategy::clip_grad_norm(double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : model_->module().ptr()->parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  return ddp::clip_grad_norm(grads, max_norm);
}

namespace {
[[maybe_unused]] const bool registered =
    register_strategy("ddp", "DistributedDataParallel: every rank holds the whole optimizer state (PyTorch's DDP)",
                      [](StrategyParts parts) {
                        auto s = std::make_unique<DdpStrategy>(std::move(parts));
                        s->build_optimizer();
                        return std::unique_ptr<Strategy>(std::move(s));
                      });
}  // namespace

}  // namespace ddp::train::detail
