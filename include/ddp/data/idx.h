// Readers for the MNIST family's idx files (MNIST, Fashion-MNIST, KMNIST...).
// Each file may be plain or gzip-compressed; which one is decided by the
// content (gzip's magic bytes 1f 8b), not by the name.
//
//   auto train = ddp::data::load_mnist_format("/usr/share/datasets/fashion-mnist", /*train=*/true);
//   train.images;   // uint8 [60000, 1, 28, 28]
//   train.labels;   // int64 [60000], 0..9
//
// Every problem with a file (missing, wrong magic number, truncated, trailing
// bytes, image and label counts that differ) is a DataError naming the file,
// the byte offset and what was expected.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "ddp/data/image_dataset.h"

namespace ddp::data {

at::Tensor read_idx_images(const std::string& path);  // uint8 [N, 1, H, W]; magic 0x00000803
at::Tensor read_idx_labels(const std::string& path);  // int64 [N]; magic 0x00000801

// dir holds train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz],
// t10k-labels-idx1-ubyte[.gz] (train = false reads the t10k files). When both x and x.gz exist the plain x is read.
// num_classes > 0: every label must be in 0..num_classes-1, else a DataError naming the labels file and the
// first record outside.
ImageDataset load_mnist_format(const std::string& dir, bool train, int64_t num_classes = 0);

}  // namespace ddp::data
