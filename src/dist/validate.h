// Argument checks shared by every backend, so that bad input gets the same
// std::invalid_argument everywhere, named and prefixed "[gloo] rank 1/4 op: ".
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "ddp/dist/types.h"
#include "dist/error_context.h"

namespace ddp::detail {

using ddp::throw_invalid;

// dtypes every backend supports.
bool is_supported_dtype(at::ScalarType t);
// Defined, dense, on the CPU or a GPU, contiguous, supported dtype.
void check_tensor(const ErrorContext& ctx, const at::Tensor& t, const std::string& name);
// BAND/BOR/BXOR need integer dtypes; AVG needs floating ones.
void check_op(const ErrorContext& ctx, ReduceOp op, at::ScalarType dtype);
// 0 <= r < ctx.size.
void check_rank(const ErrorContext& ctx, int r, const std::string& name);
// On like's device.
void check_same_device(const ErrorContext& ctx, const at::Tensor& t, const std::string& name, const at::Tensor& like,
                       const std::string& like_name);
// Same dtype, shape and device as `like`.
void check_like(const ErrorContext& ctx, const at::Tensor& t, const std::string& name, const at::Tensor& like,
                const std::string& like_name);
// A list of exactly `count` tensors, each valid and like `like`.
void check_list(const ErrorContext& ctx, const std::vector<at::Tensor>& list, const std::string& name, size_t count,
                const at::Tensor& like, const std::string& like_name);
// A list of exactly `count` valid tensors of one dtype, that of `dtype_from`
// (named in messages); sizes may differ.
void check_list_dtype(const ErrorContext& ctx, const std::vector<at::Tensor>& list, const std::string& name,
                      size_t count, const at::Tensor& dtype_from, const std::string& dtype_from_name);

// Ranks for new_group: non-empty, sorted ascending, unique, in [0, ctx.size).
void check_group_ranks(const ErrorContext& ctx, const std::vector<int>& ranks);
// Index of `rank` in `ranks`, or -1 when absent.
int index_in(const std::vector<int>& ranks, int rank);

// Per-call timeout, or the group's when unset.
inline Milliseconds effective_timeout(Milliseconds call, Milliseconds group) { return call.count() > 0 ? call : group; }

// Applies `op` elementwise: acc = acc (op) x, for the local parts of
// composite collectives (reduce_scatter through all_to_all).
void reduce_into(at::Tensor& acc, const at::Tensor& x, ReduceOp op);

}  // namespace ddp::detail
