// What a backend implements: the narrow interface under ProcessGroup.
//
// ProcessGroup (process_group.cpp) is the one front: it checks arguments,
// resolves timeouts and async_op, packs tensor lists into flat buffers and
// back, supplies what a backend lacks (AVG as SUM then a division, reductions
// of dtypes it cannot reduce in float32, reduce_scatter through all_to_all),
// and waits for synchronous calls. A backend receives only valid, contiguous,
// non-empty buffers on the device it named for the op (device_for; staging.h
// copies the others there and back) and makes its raw calls (c10d, MPI) on them.
//
// A new backend (e.g. nccl/) lives in src/dist/<name>/, defines a subclass of
// Backend and the two entry points
//   bool is_available();
//   std::unique_ptr<detail::Backend> create(const BackendOptions&);
// and is listed in registry.cpp.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/backend.h"
#include "ddp/dist/types.h"
#include "ddp/dist/work.h"
#include "dist/beat_channel.h"
#include "dist/error_context.h"

namespace ddp::detail {

// One call, as the front resolved it.
struct Call {
  ErrorContext ctx;      // "[gloo] rank 1/4 all_reduce: " for messages
  Milliseconds timeout;  // the call's or the group's (> 0), or kNoTimeout
  bool async = false;    // the caller will not wait at once (a backend may run a blocking call inline otherwise)
  int64_t seq = 0;       // this group's collective number, from 1
  int64_t bytes = 0;     // payload bytes, for reports of long waits
  OpType op = OpType::kBarrier;  // what the call does; ctx.op is its name
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // What the front must make up for.
  virtual bool can_reduce(at::ScalarType dtype) const { return true; }  // else reduced in float32
  virtual bool has_avg() const { return false; }                        // else SUM, then / size()
  virtual bool has_bitwise() const { return true; }                     // BAND, BOR, BXOR; else refused by the front
  virtual bool has_reduce_scatter() const { return false; }             // else all_to_all + local reduction
  virtual int max_tag() const { return 1 << 30; }                       // tags of send/recv lie in [0, max_tag]
  // Where it runs `op` on a buffer that lives on `where`: `where`, or the device the front stages it on.
  virtual at::Device device_for(OpType op, const at::Device& where) const { return at::Device(at::kCPU); }

  // Buffers: contiguous, non-empty, of one dtype. `op` is never AVG unless has_avg().
  virtual Work broadcast(at::Tensor& buf, int root, const Call& c) = 0;
  virtual Work all_reduce(at::Tensor& buf, ReduceOp op, const Call& c) = 0;
  virtual Work reduce(at::Tensor& buf, ReduceOp op, int root, const Call& c) = 0;
  // out: size() blocks of in.numel(), rank r's in block r.
  virtual Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) = 0;
  // out: as all_gather's at root, undefined elsewhere.
  virtual Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) = 0;
  // in: size() blocks of out.numel() at root, undefined elsewhere.
  virtual Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) = 0;
  // in: size() blocks of out.numel(); only called when has_reduce_scatter().
  virtual Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) {
    throw Error(c.ctx.prefix() + "reduce_scatter is not implemented by this backend");
  }
  // Block r of `in` (in_counts[r] elements) goes to rank r; block r of `out` comes from rank r.
  virtual Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                          const std::vector<int64_t>& in_counts, const Call& c) = 0;
  virtual Work barrier(const Call& c) = 0;
  virtual Work send(const at::Tensor& buf, int dst, int tag, const Call& c) = 0;
  virtual Work recv(at::Tensor& buf, int src, int tag, const Call& c) = 0;

  // A backend over `ranks` (checked: sorted, unique, in range) of this one; every
  // rank calls it, and those outside (index -1) get nullptr.
  virtual std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) = 0;

  // A way for the heartbeat to reach the peers without the store, or nullptr (gloo beats through its store).
  virtual std::unique_ptr<BeatChannel> beat_channel() { return nullptr; }

  // Whether a live group must let its engine go at exit, before static destructors (exit_abort.h: nccl's
  // communicators, which need the CUDA runtime), and how: abort() ends its work without waiting for peers.
  virtual bool aborts_at_exit() const { return false; }
  virtual void abort() {}
};

// The backend `name` over `opts`, unwrapped (registry.cpp); throws as create_backend.
std::unique_ptr<Backend> create_backend_impl(const std::string& name, const BackendOptions& opts);

}  // namespace ddp::detail
