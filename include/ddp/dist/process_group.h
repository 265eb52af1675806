// A set of ranks that run collectives together. One class for every backend:
// it checks arguments, resolves timeouts and async_op, packs tensor lists,
// supplies what a backend lacks (AVG, dtypes it cannot reduce) and prefixes
// errors ("[gloo] rank 2/4 all_reduce: ..."); the backend behind it (gloo,
// mpi, nccl, local: see backend.h) only moves flat buffers and declares what it supports.
//
// All tensors are dense and contiguous, on the CPU or a GPU (one device per call). Ranks in arguments (src,
// dst) are ranks within this group. Every call returns a Work; with
// async_op = false (default) it is already completed when returned.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/types.h"
#include "ddp/dist/work.h"

namespace ddp {

namespace detail {
class Backend;    // src/dist/backend_impl.h
class ExitAbort;  // src/dist/exit_abort.h
struct Call;
}  // namespace detail

class ProcessGroup;
using GroupPtr = std::shared_ptr<ProcessGroup>;

// What the ranks compare before each collective, so that ranks calling different collectives (another op,
// dtype, shape, reduce op or root, or a call one rank skipped) fail with `ranks disagree on collective #N` on
// every rank instead of hanging or aborting inside the backend:
//   kOff    nothing (DDP_DEBUG=OFF);
//   kHash   a 64-bit hash of the call, one 8-byte all_gather; the whole calls only on a mismatch. The default
//           where the backend gathers host memory itself (gloo, mpi, local); off on nccl, where it would make
//           the host wait for the GPU at every collective;
//   kDetail the whole call every time (DDP_DEBUG=DETAIL or TORCH_DISTRIBUTED_DEBUG=DETAIL), any backend.
enum class CallCheck { kOff, kHash, kDetail };
const char* to_string(CallCheck c);

// Always held by a GroupPtr (shared_from_this() hands out another from a ProcessGroup&).
class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // Made by create_backend / init_process_group / new_group, not by users.
  ProcessGroup(std::unique_ptr<detail::Backend> backend, Milliseconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend() const { return name_; }
  // The group's default timeout for operations.
  Milliseconds timeout() const { return timeout_; }

  // src's tensor is copied into every rank's tensor.
  Work broadcast(at::Tensor& tensor, const BroadcastOptions& opts = {});
  // Reduces the tensor across ranks in place on every rank.
  Work all_reduce(at::Tensor& tensor, const AllReduceOptions& opts = {});
  // Like all_reduce on each tensor, in one operation per dtype.
  Work all_reduce_coalesced(std::vector<at::Tensor>& tensors, const AllReduceOptions& opts = {});
  // Reduces into dst's tensor; other ranks' tensors are left unspecified.
  Work reduce(at::Tensor& tensor, const ReduceOptions& opts = {});
  // outputs[r] receives rank r's input; outputs.size() == size().
  Work all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input, const CollectiveOptions& opts = {});
  // Like all_gather, into dst's outputs only (other ranks pass {}); PyTorch's argument order.
  Work gather(const at::Tensor& input, std::vector<at::Tensor>& outputs, const GatherOptions& opts = {});
  // Rank r receives src's inputs[r] (other ranks pass {}).
  Work scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, const ScatterOptions& opts = {});
  // output = reduction over ranks of their inputs[rank()].
  Work reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs, const ReduceScatterOptions& opts = {});
  // outputs[r] receives rank r's inputs[rank()]; sizes may differ per pair.
  Work all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                  const CollectiveOptions& opts = {});
  Work barrier(const CollectiveOptions& opts = {});
  Work send(const at::Tensor& tensor, int dst, const P2POptions& opts = {});
  Work recv(at::Tensor& tensor, int src, const P2POptions& opts = {});

  // Whether the backend has this reduction (nccl has no bitwise ones: BAND, BOR, BXOR); a collective with one it
  // lacks is refused (InvalidArgument). Suites and callers decide by this, never by the backend's name.
  bool supports(ReduceOp op) const;
  // Where this group's collectives run without a staging copy: the rank's GPU for nccl, the CPU for gloo and mpi
  // (which take GPU tensors too). Where a rank's model and batches belong when it follows its group.
  at::Device device() const;

  // Changed between collectives, alike on every rank (see CallCheck); new_group's groups start with the default.
  void set_call_check(CallCheck c) { check_.store(c); }
  CallCheck call_check() const { return check_.load(); }

  // A group of the given ranks of this group (sorted, unique), with ranks
  // renumbered from 0 in ascending order. Every rank of this group must call
  // it with the same ranks; ranks outside get nullptr.
  GroupPtr new_group(const std::vector<int>& ranks);

  // Payload bytes this rank handed to the backend so far in all_reduce (and
  // _coalesced), broadcast, all_gather, reduce_scatter and all_to_all, in the
  // dtype each travels in. Compression hooks are measured by it.
  struct Traffic {
    int64_t bytes = 0;
  };
  Traffic traffic() const { return {bytes_.load()}; }

 private:
  // `payload`: the tensor the call moves (its bytes show in wait reports).
  detail::Call call(OpType op, const CollectiveOptions& opts, const at::Tensor& payload = {}) const;
  Work finish(Work w, const detail::Call& c) const;
  void check_reduction(const detail::Call& c, ReduceOp op, at::ScalarType dtype) const;  // dtype, and supports()
  Work issue(detail::Call c, std::function<Work(const detail::Call&)> launch, const at::Tensor& value = {});
  void await_turn();  // blocks until everything queued on the sequencer has been issued
  Work all_reduce_16bit(at::Tensor& tensor, ReduceOp op, const detail::Call& c);
  Work reduce_scatter_via_all_to_all(at::Tensor& output, const at::Tensor& flat_inputs, ReduceOp op,
                                     const detail::Call& c);

  std::unique_ptr<detail::Backend> impl_;
  // Where the backend must be let go at exit (nccl): armed after the first call; destroyed just before impl_.
  std::unique_ptr<detail::ExitAbort> exit_abort_;
  Milliseconds timeout_;
  int rank_;
  int size_;
  std::string name_;
  std::atomic<int64_t> bytes_{0};
  mutable std::atomic<int64_t> seq_{0};  // collectives called so far, numbered from 1
  std::atomic<CallCheck> check_;         // what ranks compare before each call (DDP_DEBUG)
  void count(const at::Tensor& payload);
  // Unless call_check() is kOff, checks that every rank makes this same call (op,
  // dtype, shape, reduce op, root); see src/dist/agreement.h.
  void agree(const detail::Call& c, const at::Tensor& t, int reduce_op = -1, int root = -1) const;
  // Runs continuations and keeps the order of collectives (src/dist/sequencer.h). Last: destroyed first, while
  // the backend its queued calls use still exists.
  std::shared_ptr<detail::Sequencer> sequencer_;
};

}  // namespace ddp
