#include "ddp/train/models/fashion_net.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>

#include "ddp/errors.h"
#include "ddp/parallel/sync_batch_norm.h"

namespace ddp::models {
namespace {
torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false));
}
}  // namespace

FashionNetImpl::FashionNetImpl(int64_t width, int64_t classes) {
  if (width < 1 || classes < 1)
    throw InvalidArgument("FashionNet: width and classes must be >= 1, got " + std::to_string(width) + " and " +
                          std::to_string(classes));
  conv1 = register_module("conv1", conv3x3(1, width));
  register_module("norm1", torch::nn::BatchNorm2d(width));
  conv2 = register_module("conv2", conv3x3(width, 2 * width));
  register_module("norm2", torch::nn::BatchNorm2d(2 * width));
  conv3 = register_module("conv3", conv3x3(2 * width, 2 * width));
  register_module("norm3", torch::nn::BatchNorm2d(2 * width));
  conv4 = register_module("conv4", conv3x3(2 * width, 4 * width));
  register_module("norm4", torch::nn::BatchNorm2d(4 * width));
  head = register_module("head", torch::nn::Linear(4 * width * 3 * 3, classes));
}

at::Tensor FashionNetImpl::forward(const at::Tensor& x) {
  if (x.dim() != 4 || x.size(1) != 1 || x.size(2) != 28 || x.size(3) != 28)
    throw InvalidArgument("FashionNet: expects images of [N, 1, 28, 28], got " + c10::str(x.sizes()));
  auto norm_relu = [this](const char* name, const at::Tensor& h) { return at::relu(batch_norm_child(*this, name, h)); };
  // One input channel: NCHW and NHWC are the same bytes, so the layout is set on the first output.
  at::Tensor h = conv1(x).contiguous(at::MemoryFormat::ChannelsLast);
  h = norm_relu("norm1", at::max_pool2d(h, 2));  // 14x14
  h = norm_relu("norm2", conv2(h));
  h = norm_relu("norm3", at::max_pool2d(conv3(h), 2));  // 7x7
  h = norm_relu("norm4", at::max_pool2d(conv4(h), 2));  // 3x3
  return head(h.flatten(1));  // flatten copies to NCHW order: the head's weights are laid out as in PyTorch
}

}  // namespace ddp::models
