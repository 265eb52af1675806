// The tests' small classification set: 4 classes of Gaussian blobs in 8 dimensions, the same for a seed
// (its own generator: safe in rank threads).
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <utility>

namespace ddp::testing {

inline std::pair<at::Tensor, at::Tensor> blobs(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor y = at::randint(4, {n}, gen, at::kLong);
  at::Tensor centres = at::eye(4, 8) * 3;
  return {centres.index_select(0, y) + at::randn({n, 8}, gen), y};
}

}  // namespace ddp::testing
