#include "ddp/dist/collectives.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cstring>

#include "ddp/dist/errors.h"
#include "dist/pack.h"

namespace ddp {
namespace {

GroupPtr resolve(GroupPtr g) { return g ? g : default_group(); }

at::Tensor bytes_tensor(const std::string& s) {
  auto t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t, int64_t n) {
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(n));
}

std::string pickle(const c10::IValue& v) {
  std::vector<char> data = torch::jit::pickle_save(v);
  return std::string(data.begin(), data.end());
}

c10::IValue unpickle(const std::string& s) {
  return torch::jit::pickle_load(std::vector<char>(s.begin(), s.end()));
}

}  // namespace

Work broadcast(at::Tensor& t, int root, GroupPtr g) {
  BroadcastOptions o;
  o.root = root;
  return resolve(g)->broadcast(t, o);
}
Work all_reduce(at::Tensor& t, const AllReduceOptions& o, GroupPtr g) {
  return resolve(g)->all_reduce(t, o);
}
Work all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o, GroupPtr g) {
  return resolve(g)->all_reduce_coalesced(ts, o);
}
Work reduce(at::Tensor& t, const ReduceOptions& o, GroupPtr g) { return resolve(g)->reduce(t, o); }
Work all_gather(std::vector<at::Tensor>& outs, const at::Tensor& in, GroupPtr g) {
  return resolve(g)->all_gather(outs, in);
}
Work barrier(GroupPtr g) { return resolve(g)->barrier(); }

void broadcast_coalesced(std::vector<at::Tensor>& tensors, int root, GroupPtr g) {
  g = resolve(g);
  BroadcastOptions o;
  o.root = root;
  std::vector<at::Tensor> detached;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || !tensors[i].is_contiguous())
      throw InvalidArgument("[" + g->backend() + "] rank " + std::to_string(g->rank()) + "/" + std::to_string(g->size()) +
                            " broadcast_coalesced: tensors[" + std::to_string(i) + "] is " +
                            (tensors[i].defined() ? "not contiguous" : "undefined") + "; pass contiguous tensors");
    detached.push_back(tensors[i].detach());
  }
  for (const auto& indices : detail::group_by_dtype(detached)) {
    std::vector<at::Tensor> group = detail::select(detached, indices);
    detail::Flat flat = detail::flatten(group, /*fill=*/true);
    g->broadcast(flat.buffer, o);
    detail::unflatten(flat, group);
  }
}

// Sizes first, then the bytes padded to the largest size.
std::vector<std::string> all_gather_bytes(const std::string& bytes, GroupPtr g) {
  g = resolve(g);
  const int w = g->size();
  auto size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  std::vector<at::Tensor> sizes;
  for (int i = 0; i < w; ++i) sizes.push_back(at::empty({1}, at::kLong));
  g->all_gather(sizes, size);
  int64_t max = 0;
  for (auto& s : sizes) max = std::max(max, s.item<int64_t>());
  auto padded = at::zeros({max}, at::kByte);
  if (!bytes.empty()) std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  std::vector<at::Tensor> outs;
  for (int i = 0; i < w; ++i) outs.push_back(at::empty({max}, at::kByte));
  g->all_gather(outs, padded);
  std::vector<std::string> result;
  for (int i = 0; i < w; ++i) result.push_back(tensor_bytes(outs[i], sizes[i].item<int64_t>()));
  return result;
}

std::string broadcast_bytes(const std::string& bytes, int root, GroupPtr g) {
  g = resolve(g);
  BroadcastOptions o;
  o.root = root;
  auto size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  g->broadcast(size, o);
  auto data = g->rank() == root ? bytes_tensor(bytes) : at::empty({size.item<int64_t>()}, at::kByte);
  g->broadcast(data, o);
  return tensor_bytes(data, data.numel());
}

std::vector<c10::IValue> all_gather_object(const c10::IValue& value, GroupPtr g) {
  std::vector<c10::IValue> out;
  for (auto& b : all_gather_bytes(pickle(value), std::move(g))) out.push_back(unpickle(b));
  return out;
}

c10::IValue broadcast_object(const c10::IValue& value, int root, GroupPtr g) {
  g = resolve(g);
  std::string mine = g->rank() == root ? pickle(value) : std::string();
  return unpickle(broadcast_bytes(mine, root, g));
}

}  // namespace ddp
