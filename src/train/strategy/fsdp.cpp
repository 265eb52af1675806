// --strategy fsdp-full | fsdp-grad: FullyShardedDataParallel, ZeRO-3 (parameters,
// gradients and optimizer state sharded) or ZeRO-2 (parameters gathered once per
// step), PyTorch's FSDP FULL_SHARD and SHARD_GRAD_OP. The model must be a
// torch::nn::Sequential (ddp::models::SequentialNet in a Task); its children, one
// unit each, are gathered around their forward and backward. Checkpoints hold the
// full model and the optimizer's state in PyTorch's per-parameter format, as ddp's.
#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/zero.h"
#include "strategy.h"

namespace ddp::train::detail {
namespace {

torch::nn::Sequential sequential_of(const StrategyParts& parts, const std::string& name) {
  auto seq = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(parts.model.ptr());
  if (!seq)
    throw InvalidArgument("--strategy " + name + ": the " + parts.recipe + " model is a " + parts.model.ptr()->name() +
                          ", and FSDP shards a torch::nn::Sequential (a Task's model can be a "
                          "ddp::models::SequentialNet); use --strategy ddp or zero1, or the mlp recipe");
  return torch::nn::Sequential(seq);
}

class FsdpStrategy : public Strategy {
 public:
  FsdpStrategy(StrategyParts parts, ShardingStrategy sharding, std::string name) : name_(std::move(name)) {
    if (parts.averaged)
      throw InvalidArgument("--strategy " + name_ + ": the " + parts.recipe +
                            " recipe keeps a weight average (EMA) of the whole model, which a sharded model does not "
                            "hold; use --strategy ddp or zero1, or --ema-every 0");
    if (parts.hook)
      throw InvalidArgument("--strategy " + name_ +
                            ": a comm hook compresses DDP's all_reduce; FSDP reduce-scatters its gradients itself. "
                            "Leave --comm-hook at allreduce, or use --strategy ddp or zero1");
    FSDPOptions options;
    options.group = parts.group;
    options.sharding_strategy = sharding;
    fsdp_ = std::make_unique<FullyShardedDataParallel>(sequential_of(parts, name_), options);  // rank 0's weights
    group_ = parts.group;
    // The Task's optimizer (its type and options) over the shards: one param group, as FSDP flattens each unit.
    auto like = parts.make_optimizer();
    if (like->param_groups().size() != 1)
      throw InvalidArgument("--strategy " + name_ + ": the " + parts.recipe + " optimizer has " +
                            std::to_string(like->param_groups().size()) +
                            " param groups; FSDP flattens parameters of different groups into one shard, so every "
                            "parameter needs the same options (use --strategy ddp or zero1)");
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(fsdp_->parameters(), like->param_groups()[0].options().clone());
    opt_ = ZeroRedundancyOptimizer::factory_like(*like)(std::move(groups));
  }

  at::Tensor forward(const at::Tensor& x) override { return (*fsdp_)(x); }
  // Each micro-batch's gradients are reduce-scattered and added into the shards (no full gradients kept).
  std::shared_ptr<void> no_sync() override { return nullptr; }
  const DDPStats& stats() const override { return stats_; }
  torch::optim::Optimizer& optimizer() override { return *opt_; }
  void zero_grad() override { fsdp_->zero_grad(); }
  void step() override { opt_->step(); }
  c10::IValue optimizer_state() override { return fsdp_->full_optimizer_state_dict(*opt_, 0); }
  void load_optimizer_state(const c10::IValue& full) override { fsdp_->load_full_optimizer_state_dict(*opt_, full); }
  int64_t optimizer_state_bytes() const override { return ddp::optimizer_state_bytes(*opt_); }
  std::string describe() const override { return name_; }

  // Each rank holds its shards' gradients: the lowest rank with a non-finite one names it for all.
  std::optional<std::string> non_finite_gradient() override {
    std::string bad;
    const auto names = fsdp_->unit_parameter_names();
    const auto shards = fsdp_->parameters();
    for (size_t u = 0; u < shards.size() && bad.empty(); ++u) {
      const at::Tensor& g = shards[u].grad();
      if (!g.defined() || at::isfinite(g).all().item<bool>()) continue;
      bad = "a gradient of FSDP unit " + std::to_string(u) + " (" + names[u].front() +
            (names[u].size() > 1 ? ", ..." : "") + ") (" + (at::isnan(g).any().item<bool>() ? "nan" : "inf") +
            ") in rank " + std::to_string(group_->rank()) + "'s shard";
    }
    const int first = lowest_rank_where(!bad.empty(), group_);
    if (first < 0) return std::nullopt;
    return broadcast_bytes(bad, first, group_);
  }

  std::shared_ptr<void> full_model(bool writeback) override { return fsdp_->summon_full_params(writeback); }

  // The trained weights stay in the model once the strategy is gone.
  void finish() override {
    auto full = fsdp_->full_state_dict();
    at::NoGradGuard no_grad;
    for (auto& p : fsdp_->module()->named_parameters()) p.value().set_data(full[p.key()]);
  }

 private:
  std::string name_;
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
  GroupPtr group_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  DDPStats stats_;  // FSDP's collectives are not DDP's buckets: no numbers
};

[[maybe_unused]] const bool registered_full = register_strategy(
    "fsdp-full", "FSDP FULL_SHARD (ZeRO-3): parameters, gradients and optimizer state sharded; Sequential models",
    [](StrategyParts parts) {
      return std::unique_ptr<Strategy>(
          std::make_unique<FsdpStrategy>(std::move(parts), ShardingStrategy::FullShard, "fsdp-full"));
    });
[[maybe_unused]] const bool registered_grad = register_strategy(
    "fsdp-grad", "FSDP SHARD_GRAD_OP (ZeRO-2): gradients and optimizer state sharded; Sequential models",
    [](StrategyParts parts) {
      return std::unique_ptr<Strategy>(
          std::make_unique<FsdpStrategy>(std::move(parts), ShardingStrategy::ShardGradOp, "fsdp-grad"));
    });

}  // namespace
}  // namespace ddp::train::detail
