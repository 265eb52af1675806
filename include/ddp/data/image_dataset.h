// An in-memory image classification data set, as the readers return it:
// raw uint8 pixels and int64 labels, one row per sample.
//
//   ddp::data::ImageDataset train = ddp::data::load_mnist_format("/usr/share/datasets/fashion-mnist", true);
//   at::Tensor x = ddp::data::normalize(train.images, {0.2860}, {0.3530});   // float32 [N,1,28,28]
//   at::Tensor y = train.labels;                                              // int64 [N]
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "ddp/data/data_error.h"

namespace ddp::data {

struct ImageDataset {
  at::Tensor images;  // uint8 [N, C, H, W] (C = 1 for MNIST formats, 3 for CIFAR-10)
  at::Tensor labels;  // int64 [N]
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }  // N
};

}  // namespace ddp::data
