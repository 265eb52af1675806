// FashionNet: a small, fast convolutional network for 28x28 grey images, the
// `fashion-mnist-fast` recipe's (docs/training.md). Width w (default 16):
//   conv 1-w, maxpool 2, BN, ReLU                              28 -> 14
//   conv w-2w, BN, ReLU; conv 2w-2w, maxpool 2, BN, ReLU       14 -> 7
//   conv 2w-4w, maxpool 2, BN, ReLU                            7 -> 3
//   linear 4w*9 -> 10
// Convolutions 3x3, padding 1, no bias (the BatchNorm after each has one); pooling
// before BatchNorm and ReLU, as airbench, so both run on 4x fewer elements.
// Activations are channels-last from the first convolution on: ATen's max-pool is
// 10-17x faster on them than on NCHW (bf16 and fp32, docs/benchmarks.md). ReLU, not
// GELU: ATen's bf16 GELU is slow on channels-last tensors.
// 38k parameters at w = 16 (FashionCNN: 1.48M); 0.022 GFLOP per training image (FashionCNN 0.026).
// The BatchNorms are called by name (ddp::batch_norm_child), so that
// ddp::convert_sync_batchnorm can swap them for SyncBatchNorms.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ddp::models {

class FashionNetImpl : public torch::nn::Module {
 public:
  explicit FashionNetImpl(int64_t width = 16, int64_t classes = 10);
  at::Tensor forward(const at::Tensor& x);  // x: [N, 1, 28, 28]; logits [N, classes]

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, conv4{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(FashionNet);

}  // namespace ddp::models
