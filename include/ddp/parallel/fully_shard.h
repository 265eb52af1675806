// Sharding any model, as PyTorch's FSDP2 `fully_shard`: the user marks submodules (a transformer block, a
// residual stage) by declaring them `ddp::Sharded<Block>` instead of `Block`, and shards the model with
// `ddp::FullyShard`. The model's code and its forward signatures stay as they are.
//
//   struct GPTImpl : torch::nn::Module {
//     std::vector<ddp::Sharded<Block>> blocks;                    // was std::vector<Block>: the one-line change
//     ...  blocks.push_back(register_module("h" + std::to_string(i), ddp::Sharded<Block>(cfg)));
//     at::Tensor forward(at::Tensor idx) { ... for (auto& b : blocks) x = b(x); ... }
//   };
//   ddp::FullyShard<GPT> model(GPT(cfg));                          // shards rank 0's weights
//   torch::optim::AdamW opt(model.parameters(), ...);              // this rank's shards
//   opt.zero_grad(); loss(model(idx), y).backward(); opt.step();
//
// Each unit (every marked submodule, and the root for the parameters outside them) keeps this rank's dim-0
// shard of each of its parameters (rows [r*C, (r+1)*C) with C = ceil(rows / W), PyTorch's torch.chunk). A unit
// is all-gathered just before its forward and freed after it (reshard_after_forward, ZeRO-3) or kept until its
// backward (ZeRO-2); gathered again as backward reaches its outputs; its gradients are reduce-scattered to the
// shards as soon as backward has produced them all, asynchronously, and waited for once at the end of backward.
// The next unit's gather is started before a unit runs, forward (the order of the last forward) and backward.
// The root stays gathered from its forward to its backward, as in PyTorch.
//
// Contract (as FSDP's): every rank runs the same units in the same order. A marked module runs through its
// Sharded holder (`block(x)`, not `block->forward(x)`). Parameters shared by two units are refused; shared
// within a unit they are one shard. Frozen parameters are sharded and gathered, not reduced. Buffers are
// not sharded (rank 0's are broadcast). A module may run twice in one forward.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/ddp_stats.h"

namespace torch::optim {
class Optimizer;
}

namespace ddp {

// PyTorch's MixedPrecisionPolicy: the shards (the optimizer's master weights) keep the parameters' dtype.
struct MixedPrecisionPolicy {
  std::optional<at::ScalarType> param_dtype;   // units gathered in it and run in it (bf16, fp16); unset: as they are
  std::optional<at::ScalarType> reduce_dtype;  // gradients reduce-scattered in it; unset: param_dtype
  std::optional<at::ScalarType> output_dtype;  // the root's floating-point tensor output cast to it
  bool cast_forward_inputs = true;             // each unit's floating-point tensor arguments cast to param_dtype
};

struct FullyShardOptions {
  GroupPtr group;  // the ranks that shard the parameters; null: the default group
  // HSDP (PyTorch's 2-D mesh): the ranks holding the same rows in the other replicas. Gradients are
  // reduce-scattered within `group`, then all-reduced across these. hsdp_mesh() makes both.
  GroupPtr replicate_group;
  MixedPrecisionPolicy mp_policy;
  // true: a unit's parameters are freed after its forward and gathered again for its backward (ZeRO-3,
  // FSDP's FULL_SHARD); false: kept from its forward to its backward (ZeRO-2, SHARD_GRAD_OP).
  bool reshard_after_forward = true;
};

// Bytes this rank holds now, counted from the tensors.
struct FSDPMemory {
  int64_t parameter_bytes = 0;  // shards, plus full parameters gathered at the moment
  int64_t gradient_bytes = 0;   // gradient shards, plus full gradients alive at the moment
  // Shards plus the most full parameters (and gather buffers) held at once since construction or
  // reset_peak_memory().
  int64_t peak_parameter_bytes = 0;
};

// HSDP's groups on a world of R x S ranks (PyTorch's init_device_mesh(..., (R, S))): rank = replica * S + k shards
// with the ranks of its replica and replicates with the ranks of the same k. Collective over `world` (null: the
// default group); InvalidArgument when shard_size does not divide its size.
struct HsdpMesh {
  GroupPtr shard, replicate;
};
HsdpMesh hsdp_mesh(int shard_size, GroupPtr world = nullptr);

class ShardedModel;

namespace detail {
class FsdpState;

// The tensors of a forward's result: hooks on them gather the unit again before its backward.
inline void tensors_of(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
inline void tensors_of(const std::vector<at::Tensor>& v, std::vector<at::Tensor>& out) {
  out.insert(out.end(), v.begin(), v.end());
}
template <typename... T>
void tensors_of(const std::tuple<T...>& t, std::vector<at::Tensor>& out) {
  std::apply([&](const auto&... e) { (tensors_of(e, out), ...); }, t);
}
template <typename T>
void tensors_of(const T&, std::vector<at::Tensor>&) {}  // none: the unit is kept gathered until its backward

// Around one forward of a unit: the constructor gathers it, after() lets it go (or keeps it for backward).
// A module that is not a unit of a live ShardedModel runs as it is.
class UnitForward {
 public:
  explicit UnitForward(const torch::nn::Module* module);
  // Unit `unit` of `state` (the root's, unit 0, starts a new forward).
  UnitForward(std::shared_ptr<FsdpState> state, size_t unit);
  void after(const std::vector<at::Tensor>& outputs);

  // An argument for the unit's forward: a floating-point tensor cast to the policy's param_dtype.
  template <typename T>
  decltype(auto) input(T&& arg) const {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>)
      return cast(arg, input_dtype_);
    else
      return std::forward<T>(arg);
  }
  at::Tensor output(const at::Tensor& out) const { return cast(out, output_dtype_); }

 private:
  static at::Tensor cast(const at::Tensor& t, std::optional<at::ScalarType> dtype);
  void set_dtypes();

  std::shared_ptr<FsdpState> state_;
  size_t unit_ = 0;
  std::optional<at::ScalarType> input_dtype_, output_dtype_;
};

// Records that `module` is a unit (Sharded's constructors); ShardedModel finds the marks in its tree.
void mark_unit(const std::shared_ptr<torch::nn::Module>& module);
bool is_marked_unit(const torch::nn::Module* module);

template <typename Result>
Result after_forward(UnitForward& unit, Result out) {
  if constexpr (std::is_same_v<Result, at::Tensor>) out = unit.output(out);
  std::vector<at::Tensor> tensors;
  tensors_of(out, tensors);
  unit.after(tensors);
  return out;
}
}  // namespace detail

// A module holder (Block, torch::nn::Linear, ...) that is a unit of its own when the model is sharded, and
// the plain module otherwise (the same model trains under DDP).
template <typename Holder>
class Sharded : public Holder {
 public:
  using Holder::Holder;
  Sharded(Holder holder) : Holder(std::move(holder)) {}  // NOLINT: implicit, as a holder from its module

  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    detail::UnitForward unit(this->is_empty() ? nullptr : this->get());
    return detail::after_forward(unit, this->get()->forward(unit.input(std::forward<Args>(args))...));
  }

 private:
  struct Mark {
    explicit Mark(const Holder& h) {
      if (!h.is_empty()) detail::mark_unit(h.ptr());
    }
  };
  Mark mark_{*this};
};

// The sharded state of a model (non-template; FullyShard holds one).
class ShardedModel {
 public:
  ShardedModel(std::shared_ptr<torch::nn::Module> root, FullyShardOptions options = {});
  // Units given as sets of submodules besides the marked ones (units 1..N in this order): what
  // FullyShardedDataParallel's wrap policy makes of a Sequential's children. Run them with unit_scope().
  ShardedModel(std::shared_ptr<torch::nn::Module> root, const std::vector<std::vector<torch::nn::Module*>>& units,
               FullyShardOptions options = {});
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // Around the root's forward: starts a forward and gathers the root's unit.
  detail::UnitForward forward_scope();
  // Around a given unit's forward (1..N), inside forward_scope().
  detail::UnitForward unit_scope(size_t unit);

  // This rank's shards, one per parameter (shared ones once), in the model's order: what the optimizer steps.
  std::vector<at::Tensor> parameters() const;
  // The same, named as the model names the parameters (a shared one by its first name).
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const;
  void zero_grad();
  // Collective, after backward: the total 2-norm of the whole model's gradients (every rank's rows), and every
  // rank's rows scaled by max_norm / (norm + 1e-6) when that is below 1: torch.nn.utils.clip_grad_norm_ of the
  // full model (FSDP's clip_grad_norm_; nothing scaled where the norm is not finite). Returns the norm before
  // clipping, the same on every rank, as a 0-dim float32 tensor on the shards' device (nothing read on the host).
  at::Tensor clip_grad_norm_(double max_norm);
  // The reduce-scatters' time in synchronised backward passes, as DDP's stats() counts its buckets': from the
  // first unit's launch to the last one done, and the part after backward's computation ended.
  const DDPStats& stats() const;
  // The shard of one of the model's parameters; InvalidArgument for another tensor.
  at::Tensor shard_of(const at::Tensor& param) const;

  // Collective: every rank gets the full parameters (every name of a shared one) and buffers, named as the model.
  torch::OrderedDict<std::string, at::Tensor> full_state_dict();
  // Every rank: loads a full state dict (this rank keeps its rows); names and shapes as the model's.
  void load_full_state_dict(const torch::OrderedDict<std::string, at::Tensor>& state);
  // Collective: while the guard lives, the model's parameters hold their full values (PyTorch's
  // summon_full_params); with writeback, what was written into them becomes the shards when it ends.
  std::shared_ptr<void> summon_full_params(bool writeback = false);

  // Collective: the state of `optimizer` (over parameters(), in any param groups) as PyTorch's
  // optimizer.state_dict() of the same optimizer over the full parameters (a DDP run's), on rank dst; None
  // elsewhere (FSDP's full_optim_state_dict(rank0_only=True)).
  c10::IValue full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst = 0);
  // Every rank: loads such a whole state (from a DDP, ZeRO or sharded run, any world size): each rank keeps
  // its rows. InvalidArgument on another model.
  void load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& full);
  // Collective: each rank writes its rows of every parameter (with the full shape and the rows' offset),
  // the buffers and `optimizer`'s state of them, if given, to dir/shard-<rank>-of-<world>.pt, atomically;
  // returns when all are written.
  void save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer = nullptr);
  // Loads what save_sharded wrote, at any world size and from any units: each rank reads the files holding
  // rows of its own, by parameter name. InvalidArgument names the file and the parameter.
  void load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer = nullptr);

  // Units that hold parameters.
  size_t num_units() const;
  // Each such unit's parameter names (the root's first), a shared parameter by its first name.
  std::vector<std::vector<std::string>> unit_parameter_names() const;
  FSDPMemory memory() const;
  void reset_peak_memory();
  GroupPtr group() const;
  const std::shared_ptr<torch::nn::Module>& module() const { return root_; }

 private:
  void build(const std::vector<std::vector<torch::nn::Module*>>& units, FullyShardOptions options);

  std::shared_ptr<torch::nn::Module> root_;
  std::shared_ptr<detail::FsdpState> state_;
};

// The root of a sharded model: calls it as the model is called; everything else through sharded().
template <typename Holder>
class FullyShard {
 public:
  explicit FullyShard(Holder model, FullyShardOptions options = {})
      : model_(std::move(model)), sharded_(model_.ptr(), std::move(options)) {}

  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    detail::UnitForward root = sharded_.forward_scope();
    return detail::after_forward(root, model_->forward(root.input(std::forward<Args>(args))...));
  }

  std::vector<at::Tensor> parameters() const { return sharded_.parameters(); }
  torch::OrderedDict<std::string, at::Tensor> named_parameters() const { return sharded_.named_parameters(); }
  Holder& module() { return model_; }
  ShardedModel& sharded() { return sharded_; }

 private:
  Holder model_;
  ShardedModel sharded_;
};

}  // namespace ddp
