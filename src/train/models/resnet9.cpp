#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/pooling.h>

#include <stdexcept>

#include "ddp/train/models/resnet.h"

namespace ddp::models {

at::Tensor patch_whitening(const at::Tensor& data, int64_t patch) {
  if (data.dim() != 4) throw std::invalid_argument("patch_whitening: data must be [N, C, H, W]");
  const int64_t c = data.size(1);
  // All patch x patch windows as rows of c*patch*patch values, in (c, h, w) order.
  at::Tensor patches = data.to(at::kFloat).unfold(2, patch, 1).unfold(3, patch, 1);  // N C H' W' p p
  patches = patches.permute({0, 2, 3, 1, 4, 5}).reshape({-1, c * patch * patch});
  at::Tensor x = patches.to(at::kDouble) / std::sqrt(double(patches.size(0) - 1));
  at::Tensor cov = x.t().mm(x);
  auto [eigenvalues, eigenvectors] = at::linalg_eigh(cov);  // ascending
  eigenvalues = eigenvalues.flip(0);
  at::Tensor filters = eigenvectors.t().flip(0).reshape({c * patch * patch, c, patch, patch});
  return (filters / (eigenvalues + 1e-2).sqrt().view({-1, 1, 1, 1})).to(at::kFloat);
}

GhostBatchNormImpl::GhostBatchNormImpl(int64_t features, int64_t num_splits)
    : features_(features), splits_(num_splits) {
  weight = register_parameter("weight", at::ones({features}), /*requires_grad=*/false);
  bias = register_parameter("bias", at::zeros({features}));
  running_mean = register_buffer("running_mean", at::zeros({features * num_splits}));
  running_var = register_buffer("running_var", at::ones({features * num_splits}));
  num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
}

at::Tensor GhostBatchNormImpl::forward(const at::Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (is_training()) {
    if (n % splits_ != 0)
      throw std::invalid_argument("GhostBatchNorm: the batch (" + std::to_string(n) + ") must divide by num_splits (" +
                                  std::to_string(splits_) + "); choose a batch size per rank that is a multiple of it");
    num_batches_tracked.add_(1);
    return at::batch_norm(x.reshape({-1, c * splits_, h, w}), weight.repeat(splits_), bias.repeat(splits_),
                          running_mean, running_var, /*training=*/true, 0.1, 1e-5, false)
        .view({n, c, h, w});
  }
  return at::batch_norm(x, weight, bias, running_mean.view({splits_, features_}).mean(0),
                        running_var.view({splits_, features_}).mean(0), false, 0.1, 1e-5, false);
}

namespace {

torch::nn::Sequential conv_bn_act(int64_t in, int64_t out, int64_t kernel, bool pool, int64_t splits) {
  torch::nn::Sequential s;
  s->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).padding(kernel / 2).bias(false)));
  if (pool) s->push_back("pool", torch::nn::MaxPool2d(2));
  s->push_back("norm", GhostBatchNorm(out, splits));
  s->push_back("act", torch::nn::CELU(torch::nn::CELUOptions().alpha(0.3)));
  return s;
}

}  // namespace

ResNet9BagOfTricksImpl::ResNet9BagOfTricksImpl(const at::Tensor& first_layer, int64_t num_classes, double scale_out,
                                               int64_t splits)
    : scale_out_(scale_out) {
  if (first_layer.dim() != 4 || first_layer.size(1) != 3)
    throw std::invalid_argument("ResNet9BagOfTricks: first_layer must be [k, 3, h, w] filters from patch_whitening");
  const int64_t k = first_layer.size(0);
  conv1 = register_module(
      "conv1", torch::nn::Conv2d(
                   torch::nn::Conv2dOptions(3, k, first_layer.size(2)).padding(first_layer.size(2) / 2).bias(false)));
  conv1->weight.set_requires_grad(false);
  {
    at::NoGradGuard no_grad;
    conv1->weight.copy_(first_layer);
  }
  conv2 = register_module("conv2", conv_bn_act(k, 64, 1, false, splits));
  conv3 = register_module("conv3", conv_bn_act(64, 128, 3, true, splits));
  res1a = register_module("res1a", conv_bn_act(128, 128, 3, false, splits));
  res1b = register_module("res1b", conv_bn_act(128, 128, 3, false, splits));
  conv4 = register_module("conv4", conv_bn_act(128, 256, 3, true, splits));
  conv5 = register_module("conv5", conv_bn_act(256, 512, 3, true, splits));
  res2a = register_module("res2a", conv_bn_act(512, 512, 3, false, splits));
  res2b = register_module("res2b", conv_bn_act(512, 512, 3, false, splits));
  linear = register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(512, num_classes).bias(false)));
}

at::Tensor ResNet9BagOfTricksImpl::forward(const at::Tensor& x) {
  at::Tensor h = conv3->forward(conv2->forward(conv1(x)));
  h = h + res1b->forward(res1a->forward(h));
  h = conv5->forward(conv4->forward(h));
  h = h + res2b->forward(res2a->forward(h));
  h = std::get<0>(h.flatten(2).max(2));  // max over the spatial dims
  return linear(h) * scale_out_;
}

}  // namespace ddp::models
