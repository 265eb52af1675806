// How the Trainer spreads a step over the ranks: Lightning's `strategy=`, ddp-train's
// --strategy. A strategy wraps the model (forward, gradient synchronization) and
// owns the optimizer and what a checkpoint holds of its state. One file per
// strategy registers itself (ddp.cpp, zero1.cpp, fsdp.cpp); the Trainer sees only this seam.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "train/finite_check.h"

namespace ddp::train::detail {

// What DistributedDataParallel needs of a type-erased module: ptr() and ->forward(x).
struct Net {
  torch::nn::AnyModule any;
  std::shared_ptr<torch::nn::Module> ptr() const { return any.ptr(); }
  Net* operator->() { return this; }
  at::Tensor forward(const at::Tensor& x) { return any.forward(x); }
};

// What a strategy is built from: the Task's model (rank 0's weights are every rank's
// once it is built), the group, the comm hook (null: plain all_reduce) and the
// optimizer the Task asked for, made over the model's parameters when called.
struct StrategyParts {
  torch::nn::AnyModule model;
  GroupPtr group;
  std::shared_ptr<CommHook> hook;
  std::function<std::unique_ptr<torch::optim::Optimizer>()> make_optimizer;
  bool averaged = false;                   // the Task keeps a weight average of the model (EMA, lookahead)
  std::optional<int64_t> hsdp_shard_size;  // --hsdp-shard-size (unset: a node's ranks)
  std::string recipe;                      // for messages: the recipe or Task whose model it is
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The training forward (gradients synchronized during the backward that follows).
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  // While the returned scope lives, backward leaves gradients unsynchronized (accumulation).
  virtual std::shared_ptr<void> no_sync() = 0;
  // Each rank's communication numbers (DDPStats: reductions, their exposed time).
  virtual const DDPStats& stats() const = 0;
  // The optimizer whose param groups the schedule sets (one per Task group, whatever the strategy).
  virtual torch::optim::Optimizer& optimizer() = 0;
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  // Collective: the optimizer's whole state in PyTorch's format on rank 0 (None elsewhere).
  virtual c10::IValue optimizer_state() = 0;
  // Every rank: a whole state, as optimizer_state() gives it; each rank keeps what it holds.
  virtual void load_optimizer_state(const c10::IValue& full) = 0;
  // Bytes of optimizer state this rank holds.
  virtual int64_t optimizer_state_bytes() const = 0;
  // "ddp", "zero1": what the first line says.
  virtual std::string describe() const = 0;
  // After a step's backward, every rank: the first non-finite gradient as "name (nan)", the same on every
  // rank; nullopt when all are finite.
  virtual std::optional<std::string> non_finite_gradient() = 0;
  // After a step's backward, every rank: each parameter's gradient summed over the whole model (the same on every
  // rank), on the device and not waited for (--nan-check-at next-step reads it a step later).
  virtual GradientSums gradient_sums() = 0;
  // After a step's backward, every rank: the gradients' total 2-norm over the whole model, and the gradients
  // scaled by max_norm / (norm + 1e-6) where that is below 1 (torch.nn.utils.clip_grad_norm_; not where the norm is
  // not finite); the same norm on every rank, a 0-dim float32 tensor on the gradients' device (not read on the host).
  virtual at::Tensor clip_grad_norm(double max_norm) = 0;
  // Collective: while the returned scope lives, the Task's model holds its full parameters on every rank (to
  // evaluate, check or checkpoint it); with writeback, what is loaded into them is trained on. Null where the
  // model always holds them.
  virtual std::shared_ptr<void> full_model(bool writeback) {
    (void)writeback;
    return nullptr;
  }
  // Collective, at the end of fit: the Task's model holds the trained weights on every rank.
  virtual void finish() {}
  // The order DDP rebuilt its gradient buckets in (DistributedDataParallelBase::bucket_order()), for a
  // checkpoint; empty where there are no such buckets or before the first step.
  virtual std::vector<int64_t> bucket_order() const { return {}; }
  // On resume, every rank: the same buckets as the run that wrote the checkpoint (an exact resume).
  virtual void load_bucket_order(const std::vector<int64_t>& order) { (void)order; }
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(StrategyParts)>;
// A strategy's file registers it once, at load time. InvalidArgument on a taken name.
bool register_strategy(const std::string& name, const std::string& summary, StrategyFactory make);
// The registered names, sorted, and a line each for --help.
std::vector<std::pair<std::string, std::string>> strategies();
// InvalidArgument naming the registered ones for an unknown name.
std::unique_ptr<Strategy> make_strategy(const std::string& name, StrategyParts parts);

}  // namespace ddp::train::detail
