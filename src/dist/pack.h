// Tensor lists as flat buffers, the one place that packs and unpacks them
// (list collectives, all_reduce_coalesced, broadcast_coalesced).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace ddp::detail {

// Tensors of one dtype, back to back in one 1-D buffer.
struct Flat {
  at::Tensor buffer;
  bool aliased = false;  // buffer is the tensors' own memory: nothing to copy back
};

// The tensors (contiguous, one dtype, at least one) as one buffer: their own
// memory when they already lie back to back in one storage and do not overlap
// `avoid`, else a new buffer, holding their values when `fill`.
Flat flatten(const std::vector<at::Tensor>& tensors, bool fill, const at::Tensor& avoid = {});
// Copies the buffer back into the tensors (nothing when aliased).
void unflatten(const Flat& flat, const std::vector<at::Tensor>& tensors);

// Indices of the tensors grouped by dtype, groups in order of first appearance
// (the same on every rank that passes the same dtypes).
std::vector<std::vector<size_t>> group_by_dtype(const std::vector<at::Tensor>& tensors);
std::vector<at::Tensor> select(const std::vector<at::Tensor>& tensors, const std::vector<size_t>& indices);

}  // namespace ddp::detail
