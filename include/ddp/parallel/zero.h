// ZeRO stage 1, PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer:
// the parameters are partitioned across the ranks (each param group's, largest
// first, each to the rank holding the fewest elements so far); each rank keeps
// the optimizer state of its partition only and steps it; then every parameter
// is broadcast from the rank that owns it. Optimizer state per rank: about 1/W
// of a plain optimizer's, for the same updates.
//
//   ddp::DistributedDataParallel model(net);
//   ddp::ZeroRedundancyOptimizer opt(net->parameters(), [](auto groups) {
//     return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(1e-3));
//   });
//   opt.zero_grad(); loss(model(x), y).backward(); opt.step();    // as with any optimizer
//   ddp::ZeroRedundancyOptimizer sharded(adam);                     // or: an optimizer as built, sharded
//   opt.consolidate_state_dict(0);                                   // every rank
//   if (rank == 0) save(opt.state_dict());                           // PyTorch's format, all parameters
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp {

struct ZeroOptions {
  GroupPtr group;  // null: the default group
};

class ZeroRedundancyOptimizer {
 public:
  // Builds the optimizer of this rank's partition from its param groups (the
  // groups' own options are kept; a group without options takes the optimizer's).
  using Factory =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup>)>;

  ZeroRedundancyOptimizer(std::vector<at::Tensor> params, Factory make, ZeroOptions options = {});
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, Factory make,
                          ZeroOptions options = {});
  // The same optimizer sharded: `like`'s type (SGD, Adam or AdamW), defaults, param groups and their
  // options; its state must still be empty. InvalidArgument for another type.
  explicit ZeroRedundancyOptimizer(const torch::optim::Optimizer& like, ZeroOptions options = {});
  // A Factory building optimizers of `like`'s type with its defaults (SGD, Adam, AdamW).
  static Factory factory_like(const torch::optim::Optimizer& like);

  // Steps this rank's partition, then broadcasts every partition from its owner (a collective).
  void step();
  // Zeroes the gradients of every parameter (in place, as LibTorch's optimizers do).
  void zero_grad();

  // The rank that owns parameter i (in the order of the given params or groups).
  int owner(size_t i) const { return owner_.at(i); }
  size_t num_parameters() const { return params_.size(); }
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  // Bytes of optimizer state this rank holds (tensors only).
  int64_t local_state_bytes() const;

  // Collective: rank `to` assembles the full optimizer state (PyTorch's format,
  // parameters indexed over all groups) from every rank's partition.
  void consolidate_state_dict(int to = 0);
  // The consolidated state; InvalidArgument on a rank that did not receive one.
  const c10::IValue& state_dict() const;
  // Every rank: the full state (from state_dict() or a plain optimizer's), of
  // which this rank keeps its partition's.
  void load_state_dict(const c10::IValue& full);

 private:
  void broadcast_partitions();

  GroupPtr group_;
  std::vector<at::Tensor> params_;                // all, in the given order
  std::vector<size_t> group_size_;                // params per group
  std::vector<int> owner_;                        // param -> rank
  std::vector<std::vector<size_t>> local_order_;  // per group: this rank's params, in its optimizer's order
  std::unique_ptr<torch::optim::Optimizer> local_;
  std::optional<c10::IValue> consolidated_;
};

}  // namespace ddp
