// Readers for CIFAR-10's binary format ("cifar-10-batches-bin"). Each file is
// a sequence of 3073-byte records: 1 label byte (0..9), then 3072 pixel bytes,
// the red plane, then green, then blue, each 32x32 row-major. Files may be
// plain or gzip-compressed (decided by the content, not the name).
//
//   auto train = ddp::data::load_cifar10("/data/cifar10", /*train=*/true);   // data_batch_1..5
//   train.images;   // uint8 [50000, 3, 32, 32]
//   auto test = ddp::data::load_cifar10("/data/cifar10", /*train=*/false);   // test_batch
//
// A size that is not a whole number of records, a label above 9 or a missing
// file is a DataError naming the file and the byte offset.
#pragma once
#include <string>

#include "ddp/data/image_dataset.h"

namespace ddp::data {

// .bin or .bin.gz (by content); records of 1 label byte + 3072 pixel bytes (R plane, G, B, 32x32 row-major)
ImageDataset read_cifar10_batch(const std::string& path);
// train: data_batch_1..5 in order; test: test_batch. Each file as .bin or .bin.gz
// (the plain .bin when both exist).
ImageDataset load_cifar10(const std::string& dir, bool train);  // uint8 [N,3,32,32]

}  // namespace ddp::data
