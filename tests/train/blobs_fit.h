// The settings the Trainer's tests on generated blobs (support/blobs.h) share: one epoch of SGD at lr 0.1 under
// `strategy`, batches of `batch` per rank, no progress line, writing into `out_dir`.
#pragma once
#include <cstdint>
#include <string>

#include "ddp/train/config.h"

namespace ddp::testing {

inline train::TrainConfig blobs_fit(const std::string& out_dir, const std::string& strategy, int64_t batch) {
  train::TrainConfig s;
  s.recipe = "blobs";
  s.out_dir = out_dir;
  s.epochs = 1;
  s.batch_size = batch;
  s.progress = false;
  s.lr = 0.1;
  s.strategy = strategy;
  return s;
}

}  // namespace ddp::testing
