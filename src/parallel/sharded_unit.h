// One FSDP unit: the parameters of some children of a Sequential, flattened
// into one buffer of W*S elements (padded with zeros), of which this rank owns
// the shard [rank*S, (rank+1)*S). The module's parameters are views into the
// full buffer while it is gathered; its storage is freed in between (the
// views, also held by autograd's saved tensors, see the memory again when it
// is gathered for backward), and at rest the parameters are empty tensors.
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/torch_compat.h"

namespace torch::autograd {
struct Node;
}

namespace ddp::detail {

// Bytes of full parameters gathered at the moment, over all units of a model, and their peak.
struct GatheredBytes {
  int64_t now = 0, peak = 0;
};

class ShardedUnit {
 public:
  // Takes rank 0's values of params (broadcast), keeps this rank's shard and
  // leaves the params at rest. Every rank calls it, in the same unit order.
  ShardedUnit(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroup& group,
              std::shared_ptr<GatheredBytes> gathered);

  // All ranks: the full parameters, in the module's parameters (all_gather of
  // the shards); if already gathered, only with refresh (the shards may have changed).
  void gather(bool refresh = false);
  // Frees the full buffer; the parameters keep pointing into its storage.
  void release();
  // Frees the full buffer and empties the parameters (between steps).
  void rest();
  bool gathered() const { return gathered_; }

  // The parameters' gradients (zero where missing), divided by the world size,
  // flattened and reduce-scattered (asynchronously); the parameters' gradients are freed.
  void reduce_gradients();
  // Waits for reduce_gradients() and adds the result into the shard's gradient
  // (nothing if no reduction is in flight).
  void finish_gradients();
  // True while a reduction is in flight that has completed (finish_gradients() then waits for nothing).
  bool reduction_done() { return reduced_.defined() && work_.is_completed(); }

  // Every rank: the full flat parameter (padded), without touching the module.
  at::Tensor gather_flat() const;
  // This rank's part of a full flat parameter (unpadded, numel() elements).
  void load_flat(const at::Tensor& flat);
  // This rank's shard itself (shard_numel() elements).
  void load_shard(const at::Tensor& shard);
  int64_t shard_numel() const { return shard_numel_; }

  const at::Tensor& shard() const { return shard_; }
  const ProcessGroup& group() const { return group_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // The params' gradient accumulators, made while they had their real shapes (autograd
  // checks gradients against the shape recorded then); kept alive for hooks.
  const std::vector<compat::AutogradNodePtr>& accumulators() const { return accumulators_; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  const std::vector<int64_t>& shape(size_t i) const { return shapes_[i]; }
  int64_t numel() const { return numel_; }
  int64_t full_bytes_now() const;      // the full buffer, if gathered
  int64_t gradient_bytes_now() const;  // gradients held beyond the shard's

 private:
  void allocate_full();
  void bind();

  std::vector<at::Tensor> params_;
  std::vector<compat::AutogradNodePtr> accumulators_;
  std::vector<std::string> names_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int64_t>> shapes_;
  ProcessGroup& group_;
  std::shared_ptr<GatheredBytes> tracker_;
  int64_t numel_ = 0, shard_numel_ = 0, padded_ = 0;
  at::Tensor full_;   // padded_ elements; storage freed while not gathered
  at::Tensor shard_;  // the leaf the optimizer steps
  bool gathered_ = false, bound_ = false;
  at::Tensor flat_grad_, reduced_;
  Work work_;
};

}  // namespace ddp::detail
