#include "dist/pack.h"

#include <ATen/ATen.h>

namespace ddp::detail {
namespace {

const char* bytes(const at::Tensor& t) { return static_cast<const char*>(t.data_ptr()); }

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

bool overlaps(const char* a, size_t a_len, const at::Tensor& b) {
  if (!b.defined() || a_len == 0 || b.nbytes() == 0) return false;
  return a < bytes(b) + b.nbytes() && bytes(b) < a + a_len;
}

// One storage, each tensor starting where the previous one ended.
bool back_to_back(const std::vector<at::Tensor>& ts) {
  const char* next = bytes(ts[0]);
  for (const auto& t : ts) {
    if (!t.storage().is_alias_of(ts[0].storage())) return false;
    if (t.numel() > 0 && bytes(t) != next) return false;
    next += t.nbytes();
  }
  return true;
}

}  // namespace

Flat flatten(const std::vector<at::Tensor>& ts, bool fill, const at::Tensor& avoid) {
  const int64_t n = total_numel(ts);
  if (ts.size() == 1 && !overlaps(bytes(ts[0]), ts[0].nbytes(), avoid)) return {ts[0].view({-1}), true};
  if (back_to_back(ts) && !overlaps(bytes(ts[0]), size_t(n) * ts[0].element_size(), avoid)) {
    at::Tensor view = at::empty({0}, ts[0].options());
    view.set_(ts[0].storage(), ts[0].storage_offset(), {n}, {1});
    return {view, true};
  }
  if (!fill) return {at::empty({n}, ts[0].options()), false};
  std::vector<at::Tensor> views;
  views.reserve(ts.size());
  for (const auto& t : ts) views.push_back(t.view({-1}));
  return {at::cat(views), false};
}

void unflatten(const Flat& flat, const std::vector<at::Tensor>& ts) {
  if (flat.aliased) return;
  int64_t offset = 0;
  for (auto t : ts) {
    const int64_t n = t.numel();
    t.view({-1}).copy_(flat.buffer.narrow(0, offset, n));
    offset += n;
  }
}

std::vector<std::vector<size_t>> group_by_dtype(const std::vector<at::Tensor>& ts) {
  std::vector<std::vector<size_t>> groups;
  std::vector<at::ScalarType> dtypes;
  for (size_t i = 0; i < ts.size(); ++i) {
    size_t g = 0;
    while (g < dtypes.size() && dtypes[g] != ts[i].scalar_type()) ++g;
    if (g == dtypes.size()) {
      dtypes.push_back(ts[i].scalar_type());
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

std::vector<at::Tensor> select(const std::vector<at::Tensor>& ts, const std::vector<size_t>& indices) {
  std::vector<at::Tensor> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(ts[i]);
  return out;
}

}  // namespace ddp::detail
