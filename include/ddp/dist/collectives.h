// torch.distributed-style free functions on the default group (or `group`),
// and object collectives for any value that converts to c10::IValue
// (numbers, strings, tensors, lists, dicts, tuples), pickled like Python does.
#pragma once
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

#include "ddp/dist/init.h"

namespace ddp {

// Every collective as a free function on the default group (or `group`), each
// with its options (so each can be async), in PyTorch's argument order.
Work broadcast(at::Tensor& tensor, int src = 0, GroupPtr group = nullptr);
Work broadcast(at::Tensor& tensor, const BroadcastOptions& opts, GroupPtr group = nullptr);
Work all_reduce(at::Tensor& tensor, const AllReduceOptions& opts = {}, GroupPtr group = nullptr);
Work all_reduce_coalesced(std::vector<at::Tensor>& tensors, const AllReduceOptions& opts = {},
                          GroupPtr group = nullptr);
Work reduce(at::Tensor& tensor, const ReduceOptions& opts = {}, GroupPtr group = nullptr);
Work all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, const CollectiveOptions& opts = {},
                GroupPtr group = nullptr);
Work gather(const at::Tensor& input, std::vector<at::Tensor>& outputs, const GatherOptions& opts = {},
            GroupPtr group = nullptr);
Work scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, const ScatterOptions& opts = {},
             GroupPtr group = nullptr);
Work reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, const ReduceScatterOptions& opts = {},
                    GroupPtr group = nullptr);
Work all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const CollectiveOptions& opts = {}, GroupPtr group = nullptr);
Work barrier(const CollectiveOptions& opts = {}, GroupPtr group = nullptr);
Work send(const at::Tensor& tensor, int dst, const P2POptions& opts = {}, GroupPtr group = nullptr);
Work recv(at::Tensor& tensor, int src, const P2POptions& opts = {}, GroupPtr group = nullptr);

// A barrier that says who is missing: rank 0 waits up to `timeout` (0: the
// group's) for every other rank and throws ddp::TimeoutError naming the ranks
// that did not arrive (the first one, or all with wait_all_ranks); the others
// wait for rank 0's release. Blocks; uses send/recv on tags it reserves.
void monitored_barrier(GroupPtr group = nullptr, Milliseconds timeout = kDefaultTimeout, bool wait_all_ranks = false);

// The lowest rank where `condition` holds, or -1 where it holds on none: how ranks agree after a step that may
// fail (or ask to stop) on some of them, so none is left waiting in the next collective. One all_reduce of one int;
// every rank of the group must call it.
int lowest_rank_where(bool condition, GroupPtr group = nullptr);

// src's tensors into every rank's, packed into one buffer per dtype (one
// broadcast per dtype instead of one per tensor). Blocks until done.
void broadcast_coalesced(std::vector<at::Tensor>& tensors, int src = 0, GroupPtr group = nullptr);

// Raw bytes from every rank (sizes may differ).
std::vector<std::string> all_gather_bytes(const std::string& bytes, GroupPtr group = nullptr);
// src's bytes on every rank.
std::string broadcast_bytes(const std::string& bytes, int src = 0, GroupPtr group = nullptr);

// Objects: any value c10::IValue holds, pickled. Tensors in them arrive on the CPU on every receiver, from any
// device (PyTorch loads them onto the sender's device index, which another rank may not have): move them with
// .to(device) where they are needed (ZeRO's and FSDP's consolidated state goes to a checkpoint from the CPU).
std::vector<c10::IValue> all_gather_object(const c10::IValue& value, GroupPtr group = nullptr);
c10::IValue broadcast_object(const c10::IValue& value, int src = 0, GroupPtr group = nullptr);
// PyTorch's object collectives: src's list into every rank's list (resized to
// src's length); every rank's object at dst (an empty list elsewhere); rank r
// gets src's objects[r] (objects.size() == size() at src, ignored elsewhere).
void broadcast_object_list(std::vector<c10::IValue>& objects, int src = 0, GroupPtr group = nullptr);
std::vector<c10::IValue> gather_object(const c10::IValue& value, int dst = 0, GroupPtr group = nullptr);
c10::IValue scatter_object_list(const std::vector<c10::IValue>& objects, int src = 0, GroupPtr group = nullptr);

// Typed forms: T is anything IValue holds, e.g. int64_t, double, std::string,
// std::vector<int64_t>, c10::Dict<std::string, double>, at::Tensor.
template <typename T>
std::vector<T> all_gather_object(const T& value, GroupPtr group = nullptr) {
  std::vector<T> out;
  for (auto& v : all_gather_object(c10::IValue(value), std::move(group))) out.push_back(v.to<T>());
  return out;
}
template <typename T>
T broadcast_object(const T& value, int src = 0, GroupPtr group = nullptr) {
  return broadcast_object(c10::IValue(value), src, std::move(group)).to<T>();
}

}  // namespace ddp
