// FullyShardedDataParallel: ZeRO-3 (and ZeRO-2), PyTorch's FSDP for LibTorch.
//
// The model is a torch::nn::Sequential; its children are grouped into units
// (the wrap policy), and sharded by ShardedModel (fully_shard.h), as any
// model is: rank r holds its dim-0 rows of each parameter, and the optimizer
// steps these shards only. A unit's full parameters exist only while it runs:
// all_gather before its forward, freed after it (FullShard), gathered again
// before its backward, freed once its gradients are reduce-scattered: each
// rank keeps the averaged gradient of its rows. ShardGradOp (ZeRO-2) keeps a
// unit's full parameters from its forward to the end of its backward (no
// second gather) and still shards gradients and optimizer state.
//
//   torch::nn::Sequential net(torch::nn::Linear(784, 512), torch::nn::Tanh(), torch::nn::Linear(512, 10));
//   ddp::FullyShardedDataParallel model(net);                 // shards rank 0's weights
//   torch::optim::Adam opt(model.parameters(), 1e-3);         // this rank's shards
//   opt.zero_grad(); loss(model(x), y).backward(); opt.step();
//   auto full = model.full_state_dict();                      // collective; names as net's
//
// Between steps the Sequential's own parameters are empty tensors: read them
// through full_state_dict(). Parameters of one unit must share a dtype.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/fully_shard.h"

namespace ddp {

enum class ShardingStrategy {
  FullShard,    // ZeRO-3: parameters, gradients and optimizer state sharded
  ShardGradOp,  // ZeRO-2: gradients and optimizer state sharded; parameters gathered once per step
};

struct FSDPOptions {
  GroupPtr group;            // the ranks that shard the model; null: the default group
  GroupPtr replicate_group;  // HYBRID_SHARD (HSDP): replicas of `group` (hsdp_mesh() makes both); null: none
  ShardingStrategy sharding_strategy = ShardingStrategy::FullShard;
  // The wrap policy. 0: every child with parameters is a unit of its own;
  // N > 0: consecutive children join a unit until it holds >= N parameters
  // (elements), as PyTorch's size_based_auto_wrap_policy(min_num_params=N).
  int64_t min_unit_params = 0;
};

class FullyShardedDataParallel {
 public:
  explicit FullyShardedDataParallel(torch::nn::Sequential module, FSDPOptions options = {});
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  at::Tensor forward(const at::Tensor& input);
  at::Tensor operator()(const at::Tensor& input) { return forward(input); }

  // This rank's rows of each parameter, in the Sequential's order: what the optimizer steps.
  std::vector<at::Tensor> parameters() const { return sharded_->parameters(); }
  // The same, named as the Sequential names its parameters.
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const { return sharded_->named_parameters(); }
  // Zeroes the gradient shards (as Optimizer::zero_grad would, in place).
  void zero_grad();

  // Collective: every rank gets the full parameters and buffers, named as the
  // Sequential names them (PyTorch's FSDP FULL_STATE_DICT, prefixes removed).
  torch::OrderedDict<std::string, at::Tensor> full_state_dict();
  // Every rank: loads a full state dict (this rank keeps its shards); names and
  // shapes must match the Sequential's.
  void load_full_state_dict(const torch::OrderedDict<std::string, at::Tensor>& state);

  // Collective: while the returned guard lives, module()'s parameters hold their full
  // values on every rank (PyTorch's summon_full_params): to evaluate, inspect or load
  // the plain model. With writeback, what was written into them becomes the shards
  // when the guard ends; without, changes are lost. Every rank ends it, in the same order.
  std::shared_ptr<void> summon_full_params(bool writeback = false);

  // Collective: the state of `optimizer` (built over parameters(), in any param groups) as
  // PyTorch's optimizer.state_dict() of the same optimizer over module()'s parameters
  // on rank dst, None elsewhere; PyTorch's FSDP.full_optim_state_dict(rank0_only=True).
  // What a DDP run's optimizer saves.
  c10::IValue full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst = 0);
  // Every rank: loads such a whole state (from a DDP or an FSDP run, any world size):
  // each rank keeps its shards' part. InvalidArgument on another model or group count.
  void load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& full);

  // Collective: each rank writes its rows (and `optimizer`'s state of them, if
  // given) to dir/shard-<rank>-of-<world>.pt, atomically; returns when all are written.
  void save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer = nullptr);
  // Loads what save_sharded (of this class or ShardedModel) wrote at any world size:
  // each rank reads the files holding its rows. InvalidArgument names the file.
  void load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer = nullptr);

  size_t num_units() const { return sharded_->num_units(); }
  // The parameter names (the Sequential's) of each unit.
  std::vector<std::vector<std::string>> unit_parameter_names() const { return sharded_->unit_parameter_names(); }
  FSDPMemory memory() const { return sharded_->memory(); }
  void reset_peak_memory() { sharded_->reset_peak_memory(); }
  torch::nn::Sequential& module() { return module_; }
  ShardedModel& sharded() { return *sharded_; }
  GroupPtr group() const { return sharded_->group(); }
  const FSDPOptions& options() const { return options_; }

 private:
  torch::nn::Sequential module_;
  FSDPOptions options_;
  std::vector<int> unit_of_child_;  // the Sequential's child k -> its unit (1..N), or -1 (no parameters)
  std::unique_ptr<ShardedModel> sharded_;
};

}  // namespace ddp
