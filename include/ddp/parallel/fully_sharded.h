// FullyShardedDataParallel: ZeRO-3 (and ZeRO-2), PyTorch's FSDP for LibTorch.
//
// The model is a torch::nn::Sequential; its children are grouped into units
// (the wrap policy). Each unit's parameters live flattened and sharded: rank r
// holds elements [r*S, (r+1)*S) of the unit's flat parameter (padded to W*S),
// and the optimizer steps these shards only. A unit's full parameters exist
// only while it runs: all_gather before its forward, freed after it
// (FullShard), gathered again before its backward, freed once its gradients
// are reduce-scattered: each rank keeps the averaged gradient of its shard.
// ShardGradOp (ZeRO-2) keeps a unit's full parameters from its forward to the
// end of its backward (no second gather) and still shards gradients and
// optimizer state.
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

namespace ddp {

enum class ShardingStrategy {
  FullShard,    // ZeRO-3: parameters, gradients and optimizer state sharded
  ShardGradOp,  // ZeRO-2: gradients and optimizer state sharded; parameters gathered once per step
};

struct FSDPOptions {
  GroupPtr group;  // null: the default group
  ShardingStrategy sharding_strategy = ShardingStrategy::FullShard;
  // The wrap policy. 0: every child with parameters is a unit of its own;
  // N > 0: consecutive children join a unit until it holds >= N parameters
  // (elements), as PyTorch's size_based_auto_wrap_policy(min_num_params=N).
  int64_t min_unit_params = 0;
};

// Bytes this rank holds now, counted from the tensors.
struct FSDPMemory {
  int64_t parameter_bytes = 0;  // shards, plus full parameters gathered at the moment
  int64_t gradient_bytes = 0;   // gradient shards, plus full gradients alive at the moment
  // Shards plus the most full parameters gathered at once since construction or reset_peak_memory().
  int64_t peak_parameter_bytes = 0;
};

namespace detail {
class ShardedUnit;
class ShardedBackward;
struct GatheredBytes;
}  // namespace detail

class FullyShardedDataParallel {
 public:
  explicit FullyShardedDataParallel(torch::nn::Sequential module, FSDPOptions options = {});
  ~FullyShardedDataParallel();
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  at::Tensor forward(const at::Tensor& input);
  at::Tensor operator()(const at::Tensor& input) { return forward(input); }

  // This rank's flat parameter shards, one per unit: what the optimizer steps.
  std::vector<at::Tensor> parameters() const;
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

  // Collective: the state of `optimizer` (built over parameters(), one param group) as
  // PyTorch's optimizer.state_dict() of the same optimizer over module()'s parameters
  // (indices in the Sequential's order) on rank dst, None elsewhere; PyTorch's
  // FSDP.full_optim_state_dict(rank0_only=True). What a DDP run's optimizer saves.
  c10::IValue full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst = 0);
  // Every rank: loads such a whole state (from a DDP or an FSDP run, any world size):
  // each rank keeps its shards' part. InvalidArgument on another model or group count.
  void load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& full);

  // Collective: each rank writes its shards (and `optimizer`'s state of them,
  // if given) to dir/shard-<rank>-of-<world>.pt, atomically; returns when all are written.
  void save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer = nullptr);
  // Loads what save_sharded wrote at any world size: each rank reads the files
  // overlapping its shards and reshards them (the optimizer's state too: it must
  // be built over parameters(), in that order). InvalidArgument names the file.
  void load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer = nullptr);

  size_t num_units() const { return units_.size(); }
  // The parameter names (the Sequential's) of each unit.
  std::vector<std::vector<std::string>> unit_parameter_names() const;
  FSDPMemory memory() const;
  void reset_peak_memory();
  torch::nn::Sequential& module() { return module_; }
  GroupPtr group() const { return group_; }
  const FSDPOptions& options() const { return options_; }

 private:
  torch::nn::Sequential module_;
  FSDPOptions options_;
  GroupPtr group_;
  std::vector<int> unit_of_child_;  // the Sequential's child k -> its unit, or -1 (no parameters)
  std::vector<std::shared_ptr<detail::ShardedUnit>> units_;
  std::unique_ptr<detail::ShardedBackward> backward_;
  std::shared_ptr<detail::GatheredBytes> gathered_;
};

}  // namespace ddp
