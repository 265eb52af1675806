// One unit of a sharded model (FSDP2's parameter group): some parameters, each sharded on dim 0. Rank r owns
// rows [r*C, r*C + n_r) of a parameter of R rows, C = ceil(R / W) (torch.chunk's), as a leaf tensor of shape
// [n_r, ...] that the optimizer steps. The shards of a unit live packed in one buffer, each padded to C rows,
// so one all_gather of it brings every rank's rows; they are copied out into the full buffer, whose views are
// the module's parameters while gathered (or land there directly: a single parameter that divides evenly). Gradients
// travel the other way: packed rank-major (each rank's rows of every parameter, padded), divided by W,
// reduce-scattered; each shard's gradient is a view of the result.
//
// States: at rest (parameters are empty tensors), gathering (all_gather in flight), gathered (parameters are
// views of the full buffer), released (views kept, memory freed: autograd's saved tensors see it again once
// gathered for backward).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/torch_compat.h"

namespace ddp::detail {

// Bytes of full parameters and gather buffers held at the moment, over all units of a model, and their peak.
struct GatheredBytes {
  int64_t now = 0, peak = 0;
};

struct ShardedParam {
  at::Tensor param;                // the module's parameter (its identity, autograd metadata and accumulator kept)
  std::vector<std::string> names;  // every name it has in the model (more than one when shared)
  std::vector<int64_t> shape;      // the full shape
  int64_t rows = 1, chunk = 1, row_numel = 1, local_rows = 0;
  int64_t packed_offset = 0;  // in the packed shards: chunk * row_numel elements each
  int64_t full_offset = 0;    // in the full buffer
  at::Tensor shard;           // [local_rows, shape[1:]...]: a leaf viewing the packed shards
  bool trainable = true;
};

// The dtypes a unit computes in (its gathered parameters) and reduces its gradients in: MixedPrecisionPolicy's
// param_dtype and reduce_dtype (unset: the parameters' own; reduce unset: the compute dtype, as FSDP2).
struct UnitPrecision {
  std::optional<at::ScalarType> param, reduce;
};

// Rows of rank k's shard of a parameter (torch.chunk's: ceil(rows / W) each, the last ones fewer or none).
inline int64_t rows_of_rank(const ShardedParam& p, int64_t k) {
  return std::max<int64_t>(0, std::min(p.chunk, p.rows - k * p.chunk));
}

class FsdpUnit {
 public:
  // Takes rank 0's values of the parameters (broadcast), keeps this rank's rows and leaves them at rest.
  // Every rank calls it, in the same unit order. The parameters must share a dtype and a device.
  // replicate: HSDP's group of the ranks holding the same rows in the other replicas (null: none).
  FsdpUnit(std::string name, std::vector<ShardedParam> params, ProcessGroup& group,
           std::shared_ptr<GatheredBytes> bytes, UnitPrecision precision = {}, ProcessGroup* replicate = nullptr);

  // Starts the all_gather unless gathered or in flight (prefetch); stale: the shards changed since.
  void start_gather(bool stale = false);
  // start_gather(), then waits for it and binds the parameters to the full values.
  void finish_gather();
  void release();  // frees the full values; the parameters keep viewing their storage
  void rest();     // frees them and empties the parameters
  // Gathers the shards' own dtype (true: to read the model, summon_full_params) or the compute dtype; rests.
  void set_full_precision(bool on);
  bool gathered() const { return state_ == kGathered; }
  bool released() const { return state_ == kReleased; }
  bool awaits_backward() const { return state_ == kReleased || (state_ == kGathering && bound_); }

  // Each trainable parameter's gradient (zero where missing) / W, reduce-scattered asynchronously (HSDP: / all
  // ranks, then all-reduced over the replicas); the parameters' gradients are freed.
  void reduce_gradients();
  // Waits for reduce_gradients() and adds the result into the shards' gradients (nothing if none in flight).
  void finish_gradients();
  bool reduction_done() { return reduced_.defined() && work_.is_completed(); }
  // HSDP: frees the full-size gradient buffer once its reduce-scatter is done, while the all-reduce over the
  // replicas may still run.
  void free_scatter_input();

  // Collective: every parameter's full value, the module untouched.
  std::vector<at::Tensor> full_values() const;
  // This rank's rows of parameter i's full value.
  void load_full(size_t i, const at::Tensor& full);
  // This rank's rows of parameter i themselves (its shard's shape).
  void load_rows(size_t i, const at::Tensor& rows);

  const std::string& name() const { return name_; }
  const std::vector<ShardedParam>& params() const { return params_; }
  size_t trainable_count() const { return trainable_; }
  bool has_frozen() const { return trainable_ < params_.size(); }
  // The trainable parameters' gradient accumulators. Made while a parameter has its real shape (autograd
  // checks gradients against the shape and dtype recorded then); a new dtype (mixed precision, or the
  // master weights summoned) makes new ones when bound: true once after that.
  const std::vector<compat::AutogradNodePtr>& accumulators() const { return accumulators_; }
  bool take_accumulators_changed() { return std::exchange(accumulators_changed_, false); }
  const ProcessGroup& group() const { return group_; }
  at::Device device() const { return packed_.defined() ? packed_.device() : at::Device(at::kCPU); }  // its shards'
  int64_t packed_bytes() const { return packed_.defined() ? int64_t(packed_.nbytes()) : 0; }
  int64_t shard_gradient_bytes() const;  // the shards' gradients (their distinct storages)
  int64_t full_bytes_now() const;
  int64_t gradient_bytes_now() const;

 private:
  enum State { kRest, kGathering, kGathered, kReleased };
  void make_full(at::ScalarType dtype);
  void drop_gather_buffers();
  void allocate_full();
  void copy_out(const at::Tensor& gathered, at::Tensor& full) const;
  void bind();
  void track(int64_t bytes);

  std::string name_;
  std::vector<ShardedParam> params_;
  std::vector<compat::AutogradNodePtr> accumulators_;
  size_t trainable_ = 0;
  ProcessGroup& group_;
  ProcessGroup* replicate_ = nullptr;
  std::shared_ptr<GatheredBytes> bytes_;
  int64_t packed_numel_ = 0, full_numel_ = 0;
  at::Tensor packed_;    // this rank's shards, padded
  at::Tensor full_;      // the full values; storage freed while not gathered
  at::Tensor outgoing_;  // the shards cast to the compute dtype while in flight (mixed precision)
  at::Tensor incoming_;  // the all_gather's output while in flight
  UnitPrecision precision_;
  Work gather_work_;
  State state_ = kRest;
  bool bound_ = false, stale_ = false, accumulators_changed_ = false;
  // One parameter whose rows divide evenly over the ranks: the all_gather's rank-major blocks are the full
  // layout, so it lands in the full buffer itself (no all_gather buffer, no copy-out).
  bool direct_ = false;
  at::Tensor flat_grad_, reduced_;
  Work work_;                         // the whole reduction
  std::optional<Work> scatter_work_;  // HSDP: its reduce-scatter alone, until flat_grad_ is freed
};

}  // namespace ddp::detail
