// The ProcessGroup interface: a set of ranks that run collectives together.
// Backends (gloo, mpi, local) implement it; users hold a std::shared_ptr.
// All tensors are dense, contiguous CPU tensors. Ranks in arguments (root,
// src, dst) are ranks within this group. Every call returns a Work; with
// async_op = false (default) it is already completed when returned.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/types.h"
#include "ddp/dist/work.h"

namespace ddp {

class ProcessGroup;
using GroupPtr = std::shared_ptr<ProcessGroup>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // The group's default timeout for operations.
  virtual Milliseconds timeout() const = 0;

  // root's tensor is copied into every rank's tensor.
  virtual Work broadcast(at::Tensor& tensor, const BroadcastOptions& opts = {}) = 0;
  // Reduces the tensor across ranks in place on every rank.
  virtual Work all_reduce(at::Tensor& tensor, const AllReduceOptions& opts = {}) = 0;
  // Like all_reduce on each tensor, in as few operations as possible.
  virtual Work all_reduce_coalesced(std::vector<at::Tensor>& tensors,
                                    const AllReduceOptions& opts = {}) = 0;
  // Reduces into root's tensor; other ranks' tensors are left unspecified.
  virtual Work reduce(at::Tensor& tensor, const ReduceOptions& opts = {}) = 0;
  // outputs[r] receives rank r's input; outputs.size() == size().
  virtual Work all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                          const CollectiveOptions& opts = {}) = 0;
  // Like all_gather, into root's outputs only (other ranks pass {}).
  virtual Work gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                      const RootOptions& opts = {}) = 0;
  // Rank r receives root's inputs[r] (other ranks pass {}).
  virtual Work scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                       const RootOptions& opts = {}) = 0;
  // output = reduction over ranks of their inputs[rank()].
  virtual Work reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                              const ReduceScatterOptions& opts = {}) = 0;
  // outputs[r] receives rank r's inputs[rank()]; sizes may differ per pair.
  virtual Work all_to_all(std::vector<at::Tensor>& outputs,
                          const std::vector<at::Tensor>& inputs,
                          const CollectiveOptions& opts = {}) = 0;
  virtual Work barrier(const CollectiveOptions& opts = {}) = 0;
  virtual Work send(const at::Tensor& tensor, int dst, const P2POptions& opts = {}) = 0;
  virtual Work recv(at::Tensor& tensor, int src, const P2POptions& opts = {}) = 0;

  // A group of the given ranks of this group (sorted, unique), with ranks
  // renumbered from 0 in ascending order. Every rank of this group must call
  // it with the same ranks; ranks outside get nullptr.
  virtual GroupPtr new_group(const std::vector<int>& ranks) = 0;
};

}  // namespace ddp
