#include "ddp/train/models/airbench.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include <stdexcept>
#include <string>

#include "ddp/parallel/sync_batch_norm.h"

namespace ddp::models {

at::Tensor airbench_whitening(const at::Tensor& images, int64_t kernel, double eps) {
  if (images.dim() != 4 || images.size(0) < 1)
    throw std::invalid_argument("airbench_whitening: images must be [N, C, H, W] with N >= 1, got " +
                                c10::str(images.sizes()));
  const int64_t c = images.size(1);
  // Every k x k window as a row of c*k*k values in (c, h, w) order.
  at::Tensor patches = images.to(at::kDouble).unfold(2, kernel, 1).unfold(3, kernel, 1);  // N C H' W' k k
  patches = patches.permute({0, 2, 3, 1, 4, 5}).reshape({-1, c * kernel * kernel});
  at::Tensor cov = patches.t().mm(patches) / double(patches.size(0));
  auto [eigenvalues, eigenvectors] = at::linalg_eigh(cov);  // ascending
  at::Tensor filters = eigenvectors.t().flip(0).reshape({c * kernel * kernel, c, kernel, kernel});
  filters = filters / (eigenvalues.flip(0) + eps).sqrt().view({-1, 1, 1, 1});
  return at::cat({filters, -filters}).to(at::kFloat);
}

namespace {

torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
  at::NoGradGuard no_grad;
  torch::nn::init::dirac_(conv->weight.narrow(0, 0, std::min(in, out)));  // starts as (part) identity
  return conv;
}

torch::nn::BatchNorm2d batch_norm(int64_t features, double momentum) {
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(features).eps(1e-12).momentum(momentum));
  bn->weight.set_requires_grad(false);  // scale fixed at 1; the bias trains
  return bn;
}

// GELU. ATen 1.13's kernel is 2-8x slower on a channels-last tensor than on a contiguous one, forward and
// backward, fp32 and bf16 (docs/benchmarks.md): on channels-last input it runs on the NHWC view (contiguous,
// the same bytes) and the result is viewed back, channels-last as the input.
at::Tensor activation(const at::Tensor& x) {
  if (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast))
    return at::gelu(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  return at::gelu(x);
}

}  // namespace

AirbenchGroupImpl::AirbenchGroupImpl(int64_t in, int64_t out, double bn_momentum) {
  conv1 = register_module("conv1", conv3x3(in, out));
  register_module("norm1", batch_norm(out, bn_momentum));
  conv2 = register_module("conv2", conv3x3(out, out));
  register_module("norm2", batch_norm(out, bn_momentum));
}

at::Tensor AirbenchGroupImpl::forward(const at::Tensor& x) {
  at::Tensor h = at::max_pool2d(conv1(x), {2, 2});
  h = activation(batch_norm_child(*this, "norm1", h));
  return activation(batch_norm_child(*this, "norm2", conv2(h)));
}

AirbenchImpl::AirbenchImpl(const at::Tensor& whitening, const AirbenchOptions& options) : options_(options) {
  if (whitening.dim() != 4 || whitening.size(1) != 3 || whitening.size(2) != whitening.size(3))
    throw std::invalid_argument("Airbench: whitening must be [k, 3, s, s] filters from airbench_whitening, got " +
                                c10::str(whitening.sizes()));
  const int64_t k = whitening.size(0);
  whiten = register_module("whiten", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, k, whitening.size(2)).bias(true)));
  {
    at::NoGradGuard no_grad;
    whiten->weight.copy_(whitening);
    whiten->bias.zero_();
  }
  whiten->weight.set_requires_grad(false);
  const auto& w = options.widths;
  group1 = register_module("group1", AirbenchGroup(k, w[0], options.bn_momentum));
  group2 = register_module("group2", AirbenchGroup(w[0], w[1], options.bn_momentum));
  group3 = register_module("group3", AirbenchGroup(w[1], w[2], options.bn_momentum));
  head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(w[2], options.num_classes).bias(false)));
}

at::Tensor AirbenchImpl::forward(const at::Tensor& x) {
  at::Tensor h = activation(whiten(x));
  h = group3(group2(group1(h)));
  h = at::max_pool2d(h, {3, 3}).flatten(1);
  return head(h) * options_.scale;
}

}  // namespace ddp::models
