#include "ddp/train/models/resnet50.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>

#include "ddp/parallel/sync_batch_norm.h"

namespace ddp::models {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

torch::nn::Sequential make_layer(int64_t& in, int64_t width, int64_t blocks, int64_t stride) {
  torch::nn::Sequential layer;
  for (int64_t b = 0; b < blocks; ++b) {
    layer->push_back(Bottleneck(in, width, b == 0 ? stride : 1));
    in = width * BottleneckImpl::kExpansion;
  }
  return layer;
}

}  // namespace

BottleneckImpl::BottleneckImpl(int64_t in, int64_t width, int64_t stride) {
  const int64_t out = width * kExpansion;
  conv1 = register_module("conv1", conv(in, width, 1, 1));
  register_module("bn1", torch::nn::BatchNorm2d(width));
  conv2 = register_module("conv2", conv(width, width, 3, stride));
  register_module("bn2", torch::nn::BatchNorm2d(width));
  conv3 = register_module("conv3", conv(width, out, 1, 1));
  register_module("bn3", torch::nn::BatchNorm2d(out));
  if (stride != 1 || in != out)
    downsample =
        register_module("downsample", torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out)));
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  at::Tensor h = at::relu(batch_norm_child(*this, "bn1", conv1(x)));
  h = at::relu(batch_norm_child(*this, "bn2", conv2(h)));
  h = batch_norm_child(*this, "bn3", conv3(h));
  return at::relu(h + (downsample ? downsample->forward(x) : x));
}

ResNet50Impl::ResNet50Impl(int64_t num_classes) {
  conv1 =
      register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  register_module("bn1", torch::nn::BatchNorm2d(64));
  int64_t in = 64;
  layer1 = register_module("layer1", make_layer(in, 64, 3, 1));
  layer2 = register_module("layer2", make_layer(in, 128, 4, 2));
  layer3 = register_module("layer3", make_layer(in, 256, 6, 2));
  layer4 = register_module("layer4", make_layer(in, 512, 3, 2));
  for (const auto& layer : {layer1, layer2, layer3, layer4})
    for (size_t i = 0; i < layer->size(); ++i) blocks_.emplace_back(Bottleneck(layer->ptr<BottleneckImpl>(i)));
  fc = register_module("fc", torch::nn::Linear(512 * BottleneckImpl::kExpansion, num_classes));
  for (auto& m : modules(/*include_self=*/false))
    if (auto* c = m->as<torch::nn::Conv2d>())
      torch::nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
}

at::Tensor ResNet50Impl::forward(const at::Tensor& x) {
  at::Tensor h = at::max_pool2d(at::relu(batch_norm_child(*this, "bn1", conv1(x))), 3, 2, 1);
  for (auto& block : blocks_) h = block(h);
  return fc(at::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
}

}  // namespace ddp::models
