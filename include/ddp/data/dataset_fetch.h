// A LibTorch dataset (torch::data::datasets::Dataset: get(i) -> Example{data, target}, size()) as a
// BatchLoader's fetch function: the loader's worker threads call get() for the indices of a batch and
// stack the examples. get() must be safe to call from several threads at once (reading is; a dataset
// that caches or seeks a shared file handle needs BatchLoaderOptions::workers = 1).
//
//   auto [fetch, n] = ddp::data::fetch_dataset(torch::data::datasets::MNIST("data/mnist"));
//   ddp::data::BatchLoader loader(n, fetch, options);
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/errors.h"

namespace ddp::data {

template <typename Dataset>
std::pair<FetchBatch, int64_t> fetch_dataset(Dataset dataset) {
  const auto size = dataset.size();
  if (!size.has_value())
    throw InvalidArgument("fetch_dataset: the dataset has no size() (a stream dataset); give it a size");
  auto shared = std::make_shared<Dataset>(std::move(dataset));
  FetchBatch fetch = [shared](const std::vector<int64_t>& indices, at::Generator&) {
    std::vector<at::Tensor> xs, ys;
    xs.reserve(indices.size());
    ys.reserve(indices.size());
    for (int64_t i : indices) {
      auto example = shared->get(static_cast<size_t>(i));
      xs.push_back(example.data);
      ys.push_back(example.target);
    }
    return Batch{at::stack(xs), at::stack(ys)};
  };
  return {std::move(fetch), static_cast<int64_t>(*size)};
}

}  // namespace ddp::data
