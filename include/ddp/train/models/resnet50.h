// torchvision's ResNet-50 (v1.5: the stride in each bottleneck's 3x3
// convolution), its layout and parameter names (conv1, bn1, layer1..4 of
// Bottlenecks with conv1..3, bn1..3, downsample.0/1, fc) and initialisation
// (He-normal fan_out convolutions, BN scale 1 and shift 0). BatchNorms are
// called by name or through a Sequential, so convert_sync_batchnorm can swap them.
//
//   ddp::models::ResNet50 net(1000);
//   at::Tensor logits = net->forward(images);   // [N, 3, H, W] -> [N, 1000]
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "ddp/parallel/fully_shard.h"

namespace ddp::models {

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in, int64_t width, int64_t stride);  // out = width * 4
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNet50Impl : public torch::nn::Module {
 public:
  explicit ResNet50Impl(int64_t num_classes = 1000);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};  // their names
  // Each bottleneck block a unit of its own when the model is sharded (--strategy fsdp-*), gathered one at a time.
  std::vector<ddp::Sharded<Bottleneck>> blocks_;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet50);

}  // namespace ddp::models
