// ResNets for CIFAR-10 (32x32 RGB, 10 classes).
//
// ResNet18: torchvision's resnet18 layout and parameter names (conv1, bn1,
// layer1..4 of BasicBlocks, fc); with
// cifar_stem the 7x7/2 stem and max-pool become one 3x3/1 conv (the usual
// CIFAR variant: 16x the compute, several points more accuracy). BatchNorms
// are called by name (ddp::batch_norm_child) or through a Sequential, so that
// ddp::convert_sync_batchnorm can swap them for SyncBatchNorms.
//
// ResNet9BagOfTricks: the "ResNet bag of tricks" network for CIFAR-10:
// a frozen first layer of patch-whitening filters computed from training
// data, ghost batch norm (statistics over 16 slices of the batch, frozen
// scale), CELU(0.3), max over the spatial dims, logits scaled by 0.125.
//
//   auto w = ddp::models::patch_whitening(train_images.narrow(0, 0, 10000).slice(2, 4, -4).slice(3, 4, -4));
//   ddp::models::ResNet9BagOfTricks net(w, 10);
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "ddp/parallel/fully_shard.h"

namespace ddp::models {

// ---- ResNet-18 -------------------------------------------------------------

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNet18Options {
  int64_t num_classes = 10;
  bool cifar_stem = false;
};

class ResNet18Impl : public torch::nn::Module {
 public:
  explicit ResNet18Impl(const ResNet18Options& options = {});
  at::Tensor forward(const at::Tensor& x);  // [N, 3, H, W] -> logits [N, num_classes]

 private:
  ResNet18Options options_;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};  // their names
  // layer1.0 ... layer4.1: each residual block a unit of its own when the model is sharded (--strategy fsdp-*),
  // gathered one at a time (a stage would be: layer4 alone is 75% of the model).
  std::vector<ddp::Sharded<BasicBlock>> blocks_;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet18);

// ---- ResNet-9, bag of tricks -------------------------------------------------

// Filters w [c*h*w, c, h, w] such that conv2d(data, w) has decorrelated,
// unit-variance channels: eigenvectors of the covariance of all h x w patches
// of `data` [N, c, H, W] (float), largest eigenvalue first, scaled by
// 1/sqrt(eigenvalue + 1e-2).
at::Tensor patch_whitening(const at::Tensor& data, int64_t patch = 3);

// BatchNorm whose training statistics are taken over num_splits slices of the
// batch ("ghost" batches); the scale is frozen at 1. Evaluation uses the mean
// of the slices' running statistics. The batch must divide by num_splits.
class GhostBatchNormImpl : public torch::nn::Module {
 public:
  GhostBatchNormImpl(int64_t features, int64_t num_splits);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t features_, splits_;
};
TORCH_MODULE(GhostBatchNorm);

class ResNet9BagOfTricksImpl : public torch::nn::Module {
 public:
  // first_layer: the frozen filters from patch_whitening, [k, 3, 3, 3].
  ResNet9BagOfTricksImpl(const at::Tensor& first_layer, int64_t num_classes = 10, double scale_out = 0.125,
                         int64_t ghost_splits = 16);
  at::Tensor forward(const at::Tensor& x);

 private:
  double scale_out_;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Sequential conv2{nullptr}, conv3{nullptr}, res1a{nullptr}, res1b{nullptr}, conv4{nullptr}, conv5{nullptr},
      res2a{nullptr}, res2b{nullptr};
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(ResNet9BagOfTricks);

}  // namespace ddp::models
