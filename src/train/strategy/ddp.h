// The ddp strategy (ddp.cpp), which zero1 extends with a sharded optimizer.
#pragma once
#include "strategy.h"

namespace ddp::train::detail {

class DdpStrategy : public Strategy {
 public:
  explicit DdpStrategy(StrategyParts parts);
  // The Task's optimizer over the model's parameters (after DDP's broadcast of rank 0's weights).
  void build_optimizer();

  at::Tensor forward(const at::Tensor& x) override;
  std::shared_ptr<void> no_sync() override;
  const DDPStats& stats() const override;
  torch::optim::Optimizer& optimizer() override;
  void zero_grad() override;
  void step() override;
  c10::IValue optimizer_state() override;
  void load_optimizer_state(const c10::IValue& full) override;
  int64_t optimizer_state_bytes() const override;
  std::string describe() const override { return "ddp"; }
  std::optional<std::string> non_finite_gradient() override;
  GradientSums gradient_sums() override;
  at::Tensor clip_grad_norm(double max_norm) override;  // the gradients are every rank's same averages
  std::vector<int64_t> bucket_order() const override { return model_->bucket_order(); }
  void load_bucket_order(const std::vector<int64_t>& order) override { model_->load_bucket_order(order); }

 protected:
  std::unique_ptr<DistributedDataParallel<Net>> model_;
  GroupPtr group_;
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

}  // namespace ddp::train::detail
