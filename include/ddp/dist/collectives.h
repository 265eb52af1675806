// torch.distributed-style free functions on the default group (or `group`),
// and object collectives for any value that converts to c10::IValue
// (numbers, strings, tensors, lists, dicts, tuples), pickled like Python does.
#pragma once
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

#include "ddp/dist/init.h"

namespace ddp {

Work broadcast(at::Tensor& tensor, int root = 0, GroupPtr group = nullptr);
Work all_reduce(at::Tensor& tensor, const AllReduceOptions& opts = {}, GroupPtr group = nullptr);
Work all_reduce_coalesced(std::vector<at::Tensor>& tensors, const AllReduceOptions& opts = {},
                          GroupPtr group = nullptr);
Work reduce(at::Tensor& tensor, const ReduceOptions& opts = {}, GroupPtr group = nullptr);
Work all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                GroupPtr group = nullptr);
Work barrier(GroupPtr group = nullptr);
// root's tensors into every rank's, packed into one buffer per dtype (one
// broadcast per dtype instead of one per tensor). Blocks until done.
void broadcast_coalesced(std::vector<at::Tensor>& tensors, int root = 0, GroupPtr group = nullptr);

// Raw bytes from every rank (sizes may differ).
std::vector<std::string> all_gather_bytes(const std::string& bytes, GroupPtr group = nullptr);
// root's bytes on every rank.
std::string broadcast_bytes(const std::string& bytes, int root = 0, GroupPtr group = nullptr);

std::vector<c10::IValue> all_gather_object(const c10::IValue& value, GroupPtr group = nullptr);
c10::IValue broadcast_object(const c10::IValue& value, int root = 0, GroupPtr group = nullptr);

// Typed forms: T is anything IValue holds, e.g. int64_t, double, std::string,
// std::vector<int64_t>, c10::Dict<std::string, double>, at::Tensor.
template <typename T>
std::vector<T> all_gather_object(const T& value, GroupPtr group = nullptr) {
  std::vector<T> out;
  for (auto& v : all_gather_object(c10::IValue(value), std::move(group))) out.push_back(v.to<T>());
  return out;
}
template <typename T>
T broadcast_object(const T& value, int root = 0, GroupPtr group = nullptr) {
  return broadcast_object(c10::IValue(value), root, std::move(group)).to<T>();
}

}  // namespace ddp
