#include "ddp/dist/collectives.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ddp/dist/errors.h"
#include "dist/host_memory.h"
#include "dist/ivalue_tensors.h"
#include "dist/pack.h"

namespace ddp {
namespace {

GroupPtr resolve(GroupPtr g) { return g ? g : default_group(); }

at::Tensor bytes_tensor(const std::string& s) {
  auto t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(detail::host_bytes(t, "an object collective"), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t, int64_t n) {
  return std::string(static_cast<const char*>(detail::host_bytes(t, "an object collective")), size_t(n));
}

// Tensors travel from the CPU and arrive there, on every receiver (ivalue_tensors.h).
std::string pickle(const c10::IValue& v) {
  const c10::IValue on_cpu = detail::map_tensors(v, [](const at::Tensor& t) { return t.is_cpu() ? t : t.cpu(); });
  std::vector<char> data = torch::jit::pickle_save(on_cpu);
  return std::string(data.begin(), data.end());
}

c10::IValue unpickle(const std::string& s) { return torch::jit::pickle_load(std::vector<char>(s.begin(), s.end())); }

}  // namespace

Work broadcast(at::Tensor& t, int src, GroupPtr g) {
  BroadcastOptions o;
  o.src = src;
  return resolve(g)->broadcast(t, o);
}
Work broadcast(at::Tensor& t, const BroadcastOptions& o, GroupPtr g) { return resolve(g)->broadcast(t, o); }
Work all_reduce(at::Tensor& t, const AllReduceOptions& o, GroupPtr g) { return resolve(g)->all_reduce(t, o); }
Work all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o, GroupPtr g) {
  return resolve(g)->all_reduce_coalesced(ts, o);
}
Work reduce(at::Tensor& t, const ReduceOptions& o, GroupPtr g) { return resolve(g)->reduce(t, o); }
Work all_gather(std::vector<at::Tensor>& outs, const at::Tensor& in, const CollectiveOptions& o, GroupPtr g) {
  return resolve(g)->all_gather(outs, in, o);
}
Work gather(const at::Tensor& in, std::vector<at::Tensor>& outs, const GatherOptions& o, GroupPtr g) {
  return resolve(g)->gather(in, outs, o);
}
Work scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const ScatterOptions& o, GroupPtr g) {
  return resolve(g)->scatter(out, ins, o);
}
Work reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const ReduceScatterOptions& o, GroupPtr g) {
  return resolve(g)->reduce_scatter(out, ins, o);
}
Work all_to_all(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins, const CollectiveOptions& o,
                GroupPtr g) {
  return resolve(g)->all_to_all(outs, ins, o);
}
Work barrier(const CollectiveOptions& o, GroupPtr g) { return resolve(g)->barrier(o); }
Work send(const at::Tensor& t, int dst, const P2POptions& o, GroupPtr g) { return resolve(g)->send(t, dst, o); }
Work recv(at::Tensor& t, int src, const P2POptions& o, GroupPtr g) { return resolve(g)->recv(t, src, o); }

// Rank 0 receives an arrival from every other rank, then sends each a release.
void monitored_barrier(GroupPtr g, Milliseconds timeout, bool wait_all_ranks) {
  g = resolve(g);
  const int w = g->size(), me = g->rank();
  if (w == 1) return;
  if (timeout.count() <= 0) timeout = g->timeout();
  constexpr int kArrive = 32001, kRelease = 32002;  // tags of their own (MPI guarantees tags up to 32767)
  const std::string where =
      "[" + g->backend() + "] rank " + std::to_string(me) + "/" + std::to_string(w) + " monitored_barrier: ";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<Milliseconds>(deadline - std::chrono::steady_clock::now());
    return ms.count() > 0 ? ms : Milliseconds(1);
  };
  P2POptions p;
  p.tag = kArrive;
  if (me != 0) {
    at::Tensor token = at::zeros({1}, at::kInt);
    p.timeout = left();
    g->send(token, 0, p);
    p.tag = kRelease;
    p.timeout = left();
    try {
      g->recv(token, 0, p);
    } catch (const CommError& e) {
      // A timeout here, or rank 0 closing the connection when it gave up.
      throw TimeoutError(where + "rank 0 did not release the barrier within " + std::to_string(timeout.count()) +
                         " ms: another rank did not arrive (rank 0's error names it); " + e.what());
    }
    return;
  }
  // Step 1: every arrival, each waited for until the common deadline.
  std::vector<at::Tensor> tokens;
  std::vector<Work> arrivals;
  p.async_op = true;
  p.timeout = timeout;
  for (int r = 1; r < w; ++r) {
    tokens.push_back(at::zeros({1}, at::kInt));
    arrivals.push_back(g->recv(tokens.back(), r, p));
  }
  std::vector<int> missing;
  for (int r = 1; r < w; ++r) {
    if (!missing.empty() && !wait_all_ranks) break;
    try {
      arrivals[r - 1].wait(left());
    } catch (const CommError&) {  // timed out, or its process is gone
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    throw TimeoutError(where + "rank(s) " + list + " did not arrive within " + std::to_string(timeout.count()) + " ms" +
                       (wait_all_ranks ? "" : " (the first missing; wait_all_ranks lists every one)"));
  }
  // Step 2: release everyone.
  P2POptions release;
  release.tag = kRelease;
  release.timeout = left();
  at::Tensor token = at::zeros({1}, at::kInt);
  for (int r = 1; r < w; ++r) g->send(token, r, release);
}

void broadcast_coalesced(std::vector<at::Tensor>& tensors, int src, GroupPtr g) {
  g = resolve(g);
  BroadcastOptions o;
  o.src = src;
  std::vector<at::Tensor> detached;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || !tensors[i].is_contiguous())
      throw InvalidArgument("[" + g->backend() + "] rank " + std::to_string(g->rank()) + "/" +
                            std::to_string(g->size()) + " broadcast_coalesced: tensors[" + std::to_string(i) + "] is " +
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
  if (!bytes.empty()) std::memcpy(detail::host_bytes(padded, "an object collective"), bytes.data(), bytes.size());
  std::vector<at::Tensor> outs;
  for (int i = 0; i < w; ++i) outs.push_back(at::empty({max}, at::kByte));
  g->all_gather(outs, padded);
  std::vector<std::string> result;
  for (int i = 0; i < w; ++i) result.push_back(tensor_bytes(outs[i], sizes[i].item<int64_t>()));
  return result;
}

std::string broadcast_bytes(const std::string& bytes, int src, GroupPtr g) {
  g = resolve(g);
  BroadcastOptions o;
  o.src = src;
  auto size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  g->broadcast(size, o);
  auto data = g->rank() == src ? bytes_tensor(bytes) : at::empty({size.item<int64_t>()}, at::kByte);
  g->broadcast(data, o);
  return tensor_bytes(data, data.numel());
}

std::vector<c10::IValue> all_gather_object(const c10::IValue& value, GroupPtr g) {
  std::vector<c10::IValue> out;
  for (auto& b : all_gather_bytes(pickle(value), std::move(g))) out.push_back(unpickle(b));
  return out;
}

c10::IValue broadcast_object(const c10::IValue& value, int src, GroupPtr g) {
  g = resolve(g);
  std::string mine = g->rank() == src ? pickle(value) : std::string();
  return unpickle(broadcast_bytes(mine, src, g));
}

void broadcast_object_list(std::vector<c10::IValue>& objects, int src, GroupPtr g) {
  g = resolve(g);
  // Any mix of types: the list travels as one tuple.
  c10::IValue mine = g->rank() == src ? c10::IValue(c10::ivalue::Tuple::create(objects)) : c10::IValue();
  const c10::IValue got = broadcast_object(mine, src, g);
  const auto& elements = got.toTupleRef().elements();
  objects.assign(elements.begin(), elements.end());
}

int lowest_rank_where(bool condition, GroupPtr g) {
  g = resolve(g);
  at::Tensor lowest = at::full({1}, condition ? g->rank() : g->size(), at::kInt);
  g->all_reduce(lowest, op(ReduceOp::MIN)).wait();
  const int r = lowest.item<int>();
  return r == g->size() ? -1 : r;
}

// Sizes first (gathered at dst), then the bytes padded to the largest size.
std::vector<c10::IValue> gather_object(const c10::IValue& value, int dst, GroupPtr g) {
  g = resolve(g);
  const int w = g->size();
  const bool at_dst = g->rank() == dst;
  const std::string bytes = pickle(value);
  GatherOptions o;
  o.dst = dst;
  at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  at::Tensor max = size.clone();
  g->all_reduce(max, op(ReduceOp::MAX));
  std::vector<at::Tensor> sizes, blocks;
  for (int r = 0; r < w && at_dst; ++r) {
    sizes.push_back(at::empty({1}, at::kLong));
    blocks.push_back(at::empty({max.item<int64_t>()}, at::kByte));
  }
  g->gather(size, sizes, o);
  at::Tensor padded = at::zeros({max.item<int64_t>()}, at::kByte);
  if (!bytes.empty()) std::memcpy(detail::host_bytes(padded, "an object collective"), bytes.data(), bytes.size());
  g->gather(padded, blocks, o);
  std::vector<c10::IValue> out;
  for (int r = 0; r < w && at_dst; ++r) out.push_back(unpickle(tensor_bytes(blocks[r], sizes[r].item<int64_t>())));
  return out;
}

// Each rank's size and the largest (scattered from src), then padded blocks.
c10::IValue scatter_object_list(const std::vector<c10::IValue>& objects, int src, GroupPtr g) {
  g = resolve(g);
  const int w = g->size();
  const bool at_src = g->rank() == src;
  if (at_src && objects.size() != static_cast<size_t>(w))
    throw InvalidArgument("[" + g->backend() + "] rank " + std::to_string(g->rank()) + "/" + std::to_string(w) +
                          " scatter_object_list: objects has " + std::to_string(objects.size()) +
                          " entries; expected " + std::to_string(w) + " (one per rank)");
  ScatterOptions o;
  o.src = src;
  std::vector<std::string> bytes;
  int64_t max = 0;
  for (const auto& v : at_src ? objects : std::vector<c10::IValue>{}) {
    bytes.push_back(pickle(v));
    max = std::max<int64_t>(max, static_cast<int64_t>(bytes.back().size()));
  }
  std::vector<at::Tensor> headers, blocks;  // {size, max} per rank
  for (int r = 0; r < w && at_src; ++r) headers.push_back(at::tensor({int64_t(bytes[r].size()), max}, at::kLong));
  at::Tensor header = at::empty({2}, at::kLong);
  g->scatter(header, headers, o);
  const int64_t size = header[0].item<int64_t>(), width = header[1].item<int64_t>();
  for (int r = 0; r < w && at_src; ++r) {
    blocks.push_back(at::zeros({width}, at::kByte));
    if (!bytes[r].empty())
      std::memcpy(detail::host_bytes(blocks.back(), "an object collective"), bytes[r].data(), bytes[r].size());
  }
  at::Tensor mine = at::empty({width}, at::kByte);
  g->scatter(mine, blocks, o);
  return unpickle(tensor_bytes(mine, size));
}

}  // namespace ddp
