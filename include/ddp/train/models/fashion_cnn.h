// FashionCNN for 28x28 grey images: conv 1-32 k3 p1, BN, ReLU,
// maxpool 2; conv 32-64 k3, BN, ReLU, maxpool 2; linear 2304-600,
// dropout 0.25, linear 600-120, linear 120-10. forward returns logits.
// The BatchNorms are called by name (ddp::batch_norm_child), so that
// ddp::convert_sync_batchnorm can swap them for SyncBatchNorms.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ddp::models {

class FashionCNNImpl : public torch::nn::Module {
 public:
  FashionCNNImpl();
  at::Tensor forward(const at::Tensor& x);  // x: [N, 1, 28, 28]

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(FashionCNN);

}  // namespace ddp::models
