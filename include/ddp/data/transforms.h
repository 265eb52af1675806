// Batched image transforms: normalisation, and the augmentations of CIFAR-style
// training (random crop with zero padding, horizontal flip, cutout). Each acts
// on a whole batch [B, C, H, W] at once, every sample independently, and draws
// its randomness only from the generator it is given, so the same seed always
// gives the same output, on any thread.
//
//   at::Tensor x = ddp::data::normalize(train.images, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616});
//   auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
//   at::Tensor b = x.index_select(0, idx);
//   b = ddp::data::random_crop(b, 4, gen);
//   b = ddp::data::random_horizontal_flip(b, 0.5, gen);
//   b = ddp::data::cutout(b, 8, gen);
//
// The augmentations return new tensors and leave their input unchanged. Bad
// arguments (wrong rank, padding < 0, p outside [0, 1]...) throw
// ddp::InvalidArgument naming the argument.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ddp::data {

// uint8 [N,C,H,W] -> float32 [N,C,H,W]: (x/255 - mean[c]) / std[c]. mean/std sizes must equal C.
at::Tensor normalize(const at::Tensor& images, const std::vector<double>& mean, const std::vector<double>& std);

// On a float batch [B,C,H,W], each sample independently, randomness only from gen:
// zero-pad by `padding`, crop back to HxW at a random offset (each of the
// (2p+1)^2 offsets equally likely), like torchvision's RandomCrop(size, padding).
at::Tensor random_crop(const at::Tensor& batch, int64_t padding, at::Generator& gen);
// On a batch already padded (e.g. reflect-padded once for the whole data set), each sample
// independently: an h x w window at a random offset, each of the (H-h+1)(W-w+1) equally likely.
at::Tensor random_window(const at::Tensor& padded, int64_t h, int64_t w, at::Generator& gen);
// Mirrors each sample left-right (dim 3) with probability p.
at::Tensor random_horizontal_flip(const at::Tensor& batch, double p, at::Generator& gen);
// Zeroes a size x size square at a random centre (clipped at borders). The
// centre (cy, cx) is uniform over the pixels; the square covers rows
// [cy - size/2, cy - size/2 + size) and the same for columns.
at::Tensor cutout(const at::Tensor& batch, int64_t size, at::Generator& gen);

}  // namespace ddp::data
