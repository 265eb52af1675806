// --strategy fsdp-full | fsdp-grad | hsdp: the Task's model sharded as PyTorch's FSDP2 fully_shard, ZeRO-3
// (parameters, gradients and optimizer state sharded) or ZeRO-2 (parameters gathered once per step), PyTorch's
// FULL_SHARD and SHARD_GRAD_OP; hsdp: FULL_SHARD within groups of --hsdp-shard-size ranks (a node's by
// default), replicated across them (HYBRID_SHARD, a 2-D mesh). Any model: a torch::nn::Sequential's children
// (ddp::models::SequentialNet) are one unit each; elsewhere the submodules the model declares as ddp::Sharded are
// units, and the root's unit holds the rest. The Task's optimizer steps each parameter's rows, in the Task's param
// groups. Checkpoints hold the full model and the optimizer's state in PyTorch's per-parameter format, as ddp's.
#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/slurm_env.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_shard.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/zero.h"
#include "strategy.h"

namespace ddp::train::detail {
namespace {

// HSDP's groups: shards of --hsdp-shard-size ranks (a node's when unset), replicas of them across the world.
HsdpMesh hsdp_groups(const StrategyParts& parts) {
  const int world = parts.group->size();
  const int64_t size =
      parts.hsdp_shard_size.value_or(launch_env::count(launch_env::kLocalWorldSize, slurm::process()).value_or(world));
  if (size > world || world % size != 0)
    throw InvalidArgument("--strategy hsdp: --hsdp-shard-size " + std::to_string(size) + " does not divide the " +
                          std::to_string(world) + " ranks into replicas; give a divisor of " + std::to_string(world));
  return hsdp_mesh(int(size), parts.group);
}

class FsdpStrategy : public Strategy {
 public:
  FsdpStrategy(StrategyParts parts, ShardingStrategy sharding, std::string name, bool hybrid = false)
      : name_(std::move(name)), group_(parts.group) {
    if (parts.averaged)
      throw InvalidArgument("--strategy " + name_ + ": the " + parts.recipe +
                            " recipe keeps a weight average (EMA) of the whole model, which a sharded model does not "
                            "hold; use --strategy ddp or zero1, or --ema-every 0");
    if (parts.hook)
      throw InvalidArgument("--strategy " + name_ +
                            ": a comm hook compresses DDP's all_reduce; FSDP reduce-scatters its gradients itself. "
                            "Leave --comm-hook at allreduce, or use --strategy ddp or zero1");
    // Rank 0's weights, sharded.
    HsdpMesh mesh{parts.group, nullptr};
    if (hybrid) mesh = hsdp_groups(parts);
    if (auto seq = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(parts.model.ptr())) {
      FSDPOptions options;
      options.group = mesh.shard;
      options.replicate_group = mesh.replicate;
      options.sharding_strategy = sharding;
      sequential_ = std::make_unique<FullyShardedDataParallel>(torch::nn::Sequential(seq), options);
      sharded_ = &sequential_->sharded();
    } else {
      FullyShardOptions options;
      options.group = mesh.shard;
      options.replicate_group = mesh.replicate;
      options.reshard_after_forward = sharding == ShardingStrategy::FullShard;
      owned_ = std::make_unique<ShardedModel>(parts.model.ptr(), options);
      sharded_ = owned_.get();
    }
    model_ = parts.model;
    // The Task's optimizer (its type, groups and options) over the shards of its parameters.
    auto like = parts.make_optimizer();
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (const auto& group : like->param_groups()) {
      std::vector<at::Tensor> shards;
      for (const auto& p : group.params()) shards.push_back(sharded_->shard_of(p));
      groups.emplace_back(std::move(shards), group.options().clone());
    }
    opt_ = ZeroRedundancyOptimizer::factory_like(*like)(std::move(groups));
  }

  at::Tensor forward(const at::Tensor& x) override {
    if (sequential_) return (*sequential_)(x);
    ddp::detail::UnitForward root = sharded_->forward_scope();
    at::Tensor y = root.output(model_.forward(root.input(x)));
    root.after({y});
    return y;
  }
  // Each micro-batch's gradients are reduce-scattered and added into the shards (no full gradients kept).
  std::shared_ptr<void> no_sync() override { return nullptr; }
  const DDPStats& stats() const override { return sharded_->stats(); }
  torch::optim::Optimizer& optimizer() override { return *opt_; }
  void zero_grad() override { sharded_->zero_grad(); }
  void step() override { opt_->step(); }
  c10::IValue optimizer_state() override { return sharded_->full_optimizer_state_dict(*opt_, 0); }
  void load_optimizer_state(const c10::IValue& full) override { sharded_->load_full_optimizer_state_dict(*opt_, full); }
  int64_t optimizer_state_bytes() const override { return ddp::optimizer_state_bytes(*opt_); }
  std::string describe() const override { return name_; }

  // Each rank holds its rows' gradients: the lowest rank with a non-finite one names it for all. One host
  // read when all are finite.
  at::Tensor clip_grad_norm(double max_norm) override { return sharded_->clip_grad_norm_(max_norm); }
  std::optional<std::string> non_finite_gradient() override {
    const auto shards = sharded_->named_parameters();
    std::vector<at::Tensor> finite;
    for (const auto& p : shards)
      if (p.value().grad().defined()) finite.push_back(at::isfinite(p.value().grad()).all());
    std::string bad;
    if (!finite.empty() && !at::stack(finite).all().item<bool>()) {
      for (const auto& p : shards) {
        const at::Tensor& g = p.value().grad();
        if (!g.defined() || at::isfinite(g).all().item<bool>()) continue;
        bad = "a gradient of '" + p.key() + "' (" + (at::isnan(g).any().item<bool>() ? "nan" : "inf") + ") in rank " +
              std::to_string(group_->rank()) + "'s rows";
        break;
      }
    }
    const int first = lowest_rank_where(!bad.empty(), group_);
    if (first < 0) return std::nullopt;
    return broadcast_bytes(bad, first, group_);
  }

  // Each rank's rows summed, then over the ranks (a NaN in any rank's rows makes every rank's sum NaN): on a GPU
  // the all_reduce is queued (nccl's wait joins the stream), not waited for.
  GradientSums gradient_sums() override {
    GradientSums s = sum_gradients(sharded_->named_parameters());
    if (s.sums.defined()) group_->all_reduce(s.sums);
    return s;
  }

  std::shared_ptr<void> full_model(bool writeback) override { return sharded_->summon_full_params(writeback); }

  // The trained weights stay in the model once the strategy is gone.
  void finish() override {
    auto full = sharded_->full_state_dict();
    at::NoGradGuard no_grad;
    for (auto& p : sharded_->module()->named_parameters()) p.value().set_data(full[p.key()]);
  }

 private:
  std::string name_;
  GroupPtr group_;
  torch::nn::AnyModule model_;
  std::unique_ptr<FullyShardedDataParallel> sequential_;  // a Sequential: its children are the units
  std::unique_ptr<ShardedModel> owned_;                   // any other model
  ShardedModel* sharded_ = nullptr;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

[[maybe_unused]] const bool registered_full =
    register_strategy("fsdp-full", "FSDP FULL_SHARD (ZeRO-3): parameters, gradients and optimizer state sharded",
                      [](StrategyParts parts) {
                        return std::unique_ptr<Strategy>(
                            std::make_unique<FsdpStrategy>(std::move(parts), ShardingStrategy::FullShard, "fsdp-full"));
                      });
[[maybe_unused]] const bool registered_hybrid = register_strategy(
    "hsdp",
    "FSDP HYBRID_SHARD (HSDP): FULL_SHARD within groups of --hsdp-shard-size ranks (a node's), replicated across "
    "them",
    [](StrategyParts parts) {
      return std::unique_ptr<Strategy>(
          std::make_unique<FsdpStrategy>(std::move(parts), ShardingStrategy::FullShard, "hsdp", /*hybrid=*/true));
    });
[[maybe_unused]] const bool registered_grad = register_strategy(
    "fsdp-grad", "FSDP SHARD_GRAD_OP (ZeRO-2): gradients and optimizer state sharded", [](StrategyParts parts) {
      return std::unique_ptr<Strategy>(
          std::make_unique<FsdpStrategy>(std::move(parts), ShardingStrategy::ShardGradOp, "fsdp-grad"));
    });

}  // namespace
}  // namespace ddp::train::detail
