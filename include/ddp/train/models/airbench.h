// The airbench94 network for CIFAR-10 (Keller Jordan, "94% on CIFAR-10 in 3.29
// seconds on a single GPU", arXiv 2404.00498): a frozen 2x2 patch-whitening
// convolution (24 filters: 12 whitening directions and their negatives, with a
// bias trained only for the first epochs), GELU, three conv groups (conv, max-pool
// 2, BatchNorm, GELU, conv, BatchNorm, GELU) of widths 64/256/256, max-pool 3, a
// bias-free linear layer and logits scaled by 1/9. BatchNorms have eps 1e-12,
// momentum 0.4 (PyTorch's convention) and a frozen scale of 1; every 3x3 conv
// starts as kaiming-uniform with its first in_channels filters set to identity
// (dirac). Parameter names: whiten.{weight,bias}, group{1,2,3}.{conv1,norm1,conv2,norm2}.*, head.weight.
//
//   at::Tensor w = ddp::models::airbench_whitening(train_images.narrow(0, 0, 5000));
//   ddp::models::Airbench net(w);
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <array>

namespace ddp::models {

// Whitening filters [2*c*k*k, c, k, k] from images [N, c, H, W] (normalised): the eigenvectors of the
// covariance of all k x k patches, scaled by 1/sqrt(eigenvalue + eps), largest eigenvalue first, then
// the same filters negated (so GELU keeps both signs of every direction).
at::Tensor airbench_whitening(const at::Tensor& images, int64_t kernel = 2, double eps = 5e-4);

class AirbenchGroupImpl : public torch::nn::Module {
 public:
  AirbenchGroupImpl(int64_t in, int64_t out, double bn_momentum);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  // norm1 and norm2 live only in the registry and are called by name (ddp::batch_norm_child), so that
  // convert_sync_batchnorm (--sync-bn) can replace them.
};
TORCH_MODULE(AirbenchGroup);

struct AirbenchOptions {
  std::array<int64_t, 3> widths = {64, 256, 256};
  double bn_momentum = 0.4;  // PyTorch's convention: 1 - airbench's 0.6
  double scale = 1.0 / 9;    // logits multiplier
  int64_t num_classes = 10;
};

class AirbenchImpl : public torch::nn::Module {
 public:
  // whitening: airbench_whitening's filters [k2, 3, k, k] (frozen).
  explicit AirbenchImpl(const at::Tensor& whitening, const AirbenchOptions& options = {});
  at::Tensor forward(const at::Tensor& x);  // [N, 3, 32, 32] -> logits [N, num_classes]

  torch::nn::Conv2d whiten{nullptr};

 private:
  AirbenchOptions options_;
  AirbenchGroup group1{nullptr}, group2{nullptr}, group3{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Airbench);

}  // namespace ddp::models
