// Where a Task's training or evaluation samples come from: one of two kinds.
//
//   task.train = ddp::train::TensorData{x, y};                 // the whole set, on every rank
//   task.train = ddp::train::TensorData::shard(x, y, total);   // this rank's shard of `total` samples
//   task.test = ddp::train::FetchData::of(MyDataset("val"));   // a LibTorch dataset, read per batch
#pragma once
#include <ATen/ATen.h>

#include <utility>
#include <variant>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/data/dataset_fetch.h"

namespace ddp::train {

// Samples as tensors x [N, ...], y [N]. Whole (sharded false): every rank holds the same set, and the Trainer
// takes each rank's part (the DistributedSampler's for training, an exact share for evaluation). Sharded: this
// rank's own samples, `total` over all ranks; every rank's training shard must give as many batches.
struct TensorData {
  at::Tensor x, y;
  bool sharded = false;
  int64_t total = 0;  // samples over all ranks; a whole set's is its size

  static TensorData shard(at::Tensor x, at::Tensor y, int64_t total) {
    return {std::move(x), std::move(y), true, total};
  }
};

// Samples made per batch by the loader's worker threads (files, a LibTorch dataset): fetch(indices) over `total`
// samples. For training the DistributedSampler picks this rank's indices; for evaluation `indices` are this
// rank's (empty: the Trainer takes its exact share).
struct FetchData {
  data::FetchBatch fetch;
  int64_t total = 0;
  std::vector<int64_t> indices;

  // A LibTorch dataset (get(i) -> Example{data, target}, size()); get() is called from several threads.
  template <typename Dataset>
  static FetchData of(Dataset dataset) {
    FetchData d;
    std::tie(d.fetch, d.total) = data::fetch_dataset(std::move(dataset));
    return d;
  }
};

// No data yet (a Task must set both), tensors, or batches fetched.
using DataSource = std::variant<std::monostate, TensorData, FetchData>;

}  // namespace ddp::train
