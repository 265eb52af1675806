#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/pooling.h>

#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/train/models/resnet.h"

namespace ddp::models {
namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

torch::nn::Sequential make_layer(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Sequential(BasicBlock(in, out, stride), BasicBlock(out, out, 1));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
  conv1 = register_module("conv1", conv3x3(in, out, stride));
  register_module("bn1", torch::nn::BatchNorm2d(out));
  conv2 = register_module("conv2", conv3x3(out, out, 1));
  register_module("bn2", torch::nn::BatchNorm2d(out));
  if (stride != 1 || in != out)
    downsample = register_module(
        "downsample",
        torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                              torch::nn::BatchNorm2d(out)));
}

at::Tensor BasicBlockImpl::forward(const at::Tensor& x) {
  at::Tensor h = at::relu(batch_norm_child(*this, "bn1", conv1(x)));
  h = batch_norm_child(*this, "bn2", conv2(h));
  return at::relu(h + (downsample ? downsample->forward(x) : x));
}

ResNet18Impl::ResNet18Impl(const ResNet18Options& options) : options_(options) {
  if (options.cifar_stem)
    conv1 = register_module("conv1", conv3x3(3, 64, 1));
  else
    conv1 = register_module("conv1",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  register_module("bn1", torch::nn::BatchNorm2d(64));
  layer1 = register_module("layer1", make_layer(64, 64, 1));
  layer2 = register_module("layer2", make_layer(64, 128, 2));
  layer3 = register_module("layer3", make_layer(128, 256, 2));
  layer4 = register_module("layer4", make_layer(256, 512, 2));
  for (const auto& layer : {layer1, layer2, layer3, layer4})
    for (size_t i = 0; i < layer->size(); ++i) blocks_.emplace_back(BasicBlock(layer->ptr<BasicBlockImpl>(i)));
  fc = register_module("fc", torch::nn::Linear(512, options.num_classes));
  // torchvision's initialisation: He-normal (fan_out) convolutions, BN scale 1 and shift 0.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2d>())
      torch::nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
  }
}

at::Tensor ResNet18Impl::forward(const at::Tensor& x) {
  at::Tensor h = at::relu(batch_norm_child(*this, "bn1", conv1(x)));
  if (!options_.cifar_stem) h = at::max_pool2d(h, 3, 2, 1);
  for (auto& block : blocks_) h = block(h);
  return fc(at::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
}

}  // namespace ddp::models
