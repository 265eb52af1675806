// SyncBatchNorm, PyTorch's torch.nn.SyncBatchNorm: batch normalization whose
// training statistics are taken over the batches of every rank of a group, as
// if one process normalized the global batch (per-rank batches may differ in
// size, one may be empty). Gradients flow through the global statistics. In
// evaluation, or in a group of one, it is BatchNorm exactly.
//
//   auto net = std::make_shared<Net>();                 // with BatchNorm2d children
//   ddp::convert_sync_batchnorm(net, group);             // now SyncBatchNorm, same tensors
//   ddp::DistributedDataParallel model(net, {group});
//
// Costs per layer and training step: an all_gather of 2C + 1 doubles per rank in
// forward and an all_reduce of 2C doubles in backward (C channels); each waits
// for every rank (docs/ddp.md).
#pragma once
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>
#include <string>

#include "ddp/dist/process_group.h"

namespace ddp {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // group: the ranks whose batches make the statistics; null: the default group
  // (looked up at each training forward, so it may be created after the module).
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, GroupPtr group = nullptr);
  // Takes over a BatchNorm's options, training mode and its very tensors (weight,
  // bias, running_mean, running_var, num_batches_tracked are shared, as PyTorch's
  // convert_sync_batchnorm shares them): optimizers that hold them keep working.
  template <size_t D, typename Derived>
  SyncBatchNormImpl(const torch::nn::BatchNormImplBase<D, Derived>& bn, GroupPtr group)
      : options(bn.options), group(std::move(group)) {
    adopt(bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.num_batches_tracked);
    train(bn.is_training());
  }

  void reset() override;  // fresh parameters (weight 1, bias 0) and statistics (mean 0, var 1)
  void reset_running_stats();
  void reset_parameters();

  // input: [N, C, ...] with C = num_features, N >= 0. Training: normalized with
  // the statistics of all ranks' inputs (a collective: every rank of the group
  // must call it); running statistics updated with the global unbiased variance.
  at::Tensor forward(const at::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  torch::nn::BatchNormOptions options;
  GroupPtr group;
  // The names and layout of BatchNorm's: state dicts are interchangeable.
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  void adopt(const at::Tensor& w, const at::Tensor& b, const at::Tensor& mean, const at::Tensor& var,
             const at::Tensor& count);
};
TORCH_MODULE(SyncBatchNorm);

// PyTorch's SyncBatchNorm.convert_sync_batchnorm: every BatchNorm1d/2d/3d in
// `module`'s tree (itself included) becomes a SyncBatchNorm over `group` with its
// options, training mode and tensors (shared, not copied); existing
// SyncBatchNorms move to `group`. Returns `module`, or the new SyncBatchNorm when
// `module` is itself a BatchNorm.
//
// LibTorch modules call their children through typed members, which a registry
// replacement cannot reach: a BatchNorm must be called through its parent's
// registry (batch_norm_child below), a Sequential, a ModuleList or a ModuleDict
// (those are updated in place). A BatchNorm also referenced from anywhere else
// (a typed member such as `torch::nn::BatchNorm2d bn;`) would keep running
// unsynchronized, so that is an InvalidArgument naming it, before anything changes.
std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          GroupPtr group = nullptr);

// The child registered as `name` of `parent` applied to x: a BatchNorm1d/2d/3d,
// or the SyncBatchNorm convert_sync_batchnorm registered in its place. How a
// module calls a norm layer that may be converted. InvalidArgument if there is
// no such child or it is another kind of module.
at::Tensor batch_norm_child(const torch::nn::Module& parent, const std::string& name, const at::Tensor& x);

}  // namespace ddp
