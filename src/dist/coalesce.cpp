#include "dist/coalesce.h"

#include <ATen/ATen.h>

#include <map>

#include "dist/validate.h"

namespace ddp::detail {

Work all_reduce_coalesced_flat(ProcessGroup& group, std::vector<at::Tensor>& tensors,
                               const AllReduceOptions& opts) {
  ErrorContext ctx{group.backend(), group.rank(), group.size(), "all_reduce_coalesced"};
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(ctx, tensors[i], "tensors[" + std::to_string(i) + "]");
    check_op(ctx, opts.op, tensors[i].scalar_type());
  }
  // One flat buffer per dtype, in order of first appearance (same on all ranks).
  std::vector<at::ScalarType> order;
  std::map<at::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = tensors[i].scalar_type();
    if (!by_dtype.count(t)) order.push_back(t);
    by_dtype[t].push_back(i);
  }
  AllReduceOptions inner = opts;
  inner.async_op = true;
  std::vector<Work> works;
  std::vector<std::pair<at::Tensor, std::vector<size_t>>> flats;
  for (auto dtype : order) {
    const auto& idx = by_dtype[dtype];
    std::vector<at::Tensor> views;
    for (size_t i : idx) views.push_back(tensors[i].reshape({-1}));
    at::Tensor flat = at::cat(views);
    works.push_back(group.all_reduce(flat, inner));
    flats.emplace_back(flat, idx);
  }
  std::vector<at::Tensor> outs = tensors;  // share storage with the caller's tensors
  Work all = combine(std::move(works));
  all.then([outs, flats]() mutable {
    for (auto& [flat, idx] : flats) {
      int64_t offset = 0;
      for (size_t i : idx) {
        int64_t n = outs[i].numel();
        outs[i].view({-1}).copy_(flat.narrow(0, offset, n));
        offset += n;
      }
    }
  });
  return finish(std::move(all), opts, group.timeout());
}

}  // namespace ddp::detail
