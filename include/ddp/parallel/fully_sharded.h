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

  // The rest is ShardedModel's (fully_shard.h), with the Sequential's parameter names: this rank's shards
  // (what the optimizer steps), full and sharded state dicts and optimizer states (collective; they load at
  // any world size and move between ddp, zero1 and fsdp runs), summon_full_params.
  std::vector<at::Tensor> parameters() const { return sharded_->parameters(); }
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const { return sharded_->named_parameters(); }
  void zero_grad() { sharded_->zero_grad(); }
  torch::OrderedDict<std::string, at::Tensor> full_state_dict() { return sharded_->full_state_dict(); }
  void load_full_state_dict(const torch::OrderedDict<std::string, at::Tensor>& state) {
    sharded_->load_full_state_dict(state);
  }
  std::shared_ptr<void> summon_full_params(bool writeback = false) { return sharded_->summon_full_params(writeback); }
  c10::IValue full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst = 0) {
    return sharded_->full_optimizer_state_dict(optimizer, dst);
  }
  void load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& full) {
    sharded_->load_full_optimizer_state_dict(optimizer, full);
  }
  void save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer = nullptr) {
    sharded_->save_sharded(dir, optimizer);
  }
  void load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer = nullptr) {
    sharded_->load_sharded(dir, optimizer);
  }

  size_t num_units() const { return sharded_->num_units(); }
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
