// Which parameters share a gradient bucket.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace ddp::detail {

// Walks `order` (parameter indices, in the order gradients are expected) and
// fills buckets: one dtype per bucket, each closed once it reaches its cap
// (first_cap bytes for the first bucket of a dtype, cap for the others).
// Buckets come in the order they were opened: bucket 0 is ready first.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& params, const std::vector<size_t>& order,
                                                size_t first_cap, size_t cap);

}  // namespace ddp::detail
