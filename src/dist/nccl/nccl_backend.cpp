// The nccl backend: c10d's ProcessGroupNCCL on flat buffers of this process's GPU. NCCL reduces every dtype
// ddp moves (bfloat16 and float16 included) and averages natively; its work completes on a CUDA stream, so
// waiting on it orders the caller's stream after it, as PyTorch's DDP does, with no host synchronization.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <ATen/ATen.h>

#include "ddp/dist/device.h"
#include "dist/c10d_work.h"
#include "dist/nccl/nccl.h"
#include "dist/validate.h"

namespace ddp::nccl {
namespace {

using PG = c10d::ProcessGroupNCCL;
using c10d_work::HealthPtr;
using detail::Call;

c10d::ReduceOp to_c10d(const ErrorContext& ctx, ReduceOp op) {
  if (op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR)
    throw_invalid(ctx, std::string("NCCL has no ") + to_string(op) + " (bitwise) reduction; use gloo or mpi for it");
  return c10d_work::to_c10d(op);
}

class NcclBackend final : public detail::Backend {
 public:
  NcclBackend(StorePtr store, int rank, int size, Milliseconds timeout, at::Device device)
      : store_(std::move(store)), rank_(rank), size_(size), device_(device) {
    auto opts = PG::Options::create();
    opts->timeout = timeout.count() > 0 ? timeout : std::chrono::hours(24 * 365);
    try {
      pg_ = c10::make_intrusive<PG>(store_, rank, size, opts);
    } catch (...) {
      ErrorContext c{"nccl", rank, size, "init on " + device_.str()};
      throw Error(c.prefix() + "creating the NCCL group failed: " + c10d_work::current_message());
    }
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool has_avg() const override { return true; }
  bool has_bitwise() const override { return false; }  // NCCL has no bitwise reductions
  bool has_reduce_scatter() const override { return true; }
  at::Device device_for(OpType, const at::Device&) const override { return device_; }
  // A group still alive at exit (the default one, one a static holds) aborts its communicators while CUDA's
  // runtime is up, before c10d's destructor would on a runtime already shut down (exit_abort.h).
  bool aborts_at_exit() const override { return true; }
  void abort() override { pg_->abort(); }

  Work broadcast(at::Tensor& t, int root, const Call& c) override {
    c10d::BroadcastOptions co;
    co.rootRank = root;
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->broadcast(v, co); });
  }
  Work all_reduce(at::Tensor& t, ReduceOp op, const Call& c) override {
    c10d::AllreduceOptions co;
    co.reduceOp = to_c10d(where(c), op);
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->allreduce(v, co); });
  }
  Work reduce(at::Tensor& t, ReduceOp op, int root, const Call& c) override {
    c10d::ReduceOptions co;
    co.reduceOp = to_c10d(where(c), op);
    co.rootRank = root;
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->reduce(v, co); });
  }
  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) override {
    at::Tensor i = in;
    return run(c, [&] { return pg_->_allgather_base(out, i); });
  }
  Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    c10d::GatherOptions co;
    co.rootRank = root;
    std::vector<std::vector<at::Tensor>> outs;
    if (out.defined()) outs.push_back(blocks(out, in));
    std::vector<at::Tensor> inv{in};
    return run(c, [&] { return pg_->gather(outs, inv, co); });
  }
  Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    c10d::ScatterOptions co;
    co.rootRank = root;
    std::vector<std::vector<at::Tensor>> ins;
    if (in.defined()) ins.push_back(blocks(in, out));
    std::vector<at::Tensor> outv{out};
    return run(c, [&] { return pg_->scatter(outv, ins, co); });
  }
  Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) override {
    c10d::ReduceScatterOptions co;
    co.reduceOp = to_c10d(where(c), op);
    at::Tensor i = in;
    return run(c, [&] { return pg_->_reduce_scatter_base(out, i, co); });
  }
  Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                  const std::vector<int64_t>& in_counts, const Call& c) override {
    at::Tensor i = in;
    std::vector<int64_t> oc = out_counts, ic = in_counts;
    return run(c, [&] { return pg_->alltoall_base(out, i, oc, ic); });
  }
  Work barrier(const Call& c) override {
    c10d::BarrierOptions co;
    co.device_ids = {device_.index()};  // this rank's GPU, not c10d's guess
    return run(c, [&] { return pg_->barrier(co); });
  }
  Work send(const at::Tensor& t, int dst, int tag, const Call& c) override {
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->send(v, dst, tag); });
  }
  Work recv(at::Tensor& t, int src, int tag, const Call& c) override {
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->recv(v, src, tag); });
  }

  std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) override {
    std::string prefix = "ddp_group_" + std::to_string(next_group_++) + "/";  // the same count on every rank
    if (index < 0) return nullptr;
    return std::make_unique<NcclBackend>(make_prefix_store(prefix, store_), index, static_cast<int>(ranks.size()),
                                         timeout, device_);
  }

 private:
  // "[nccl] rank 1/4 all_reduce on cuda:1: ": every message names the GPU.
  ErrorContext where(const Call& c) const {
    ErrorContext ctx = c.ctx;
    ctx.op += " on " + device_.str();
    return ctx;
  }
  template <typename Fn>
  Work run(const Call& c, Fn&& fn) {
    return c10d_work::call(where(c), health_, std::forward<Fn>(fn), /*on_stream=*/true);
  }
  std::vector<at::Tensor> blocks(const at::Tensor& flat, const at::Tensor& like) const {
    std::vector<at::Tensor> out;
    for (auto& b : flat.chunk(size_)) out.push_back(b.view(like.sizes()));
    return out;
  }

  StorePtr store_;
  int rank_, size_;
  at::Device device_;
  c10::intrusive_ptr<PG> pg_;
  HealthPtr health_ = std::make_shared<c10d_work::Health>();
  int next_group_ = 0;
};

}  // namespace

bool is_available() { return cuda_device_count() > 0; }

std::unique_ptr<detail::Backend> create(const BackendOptions& opts) {
  ErrorContext c{"nccl", opts.rank, opts.world_size, "init"};
  if (!opts.store) detail::throw_invalid(c, "no store to rendezvous on");
  if (opts.world_size < 1 || opts.rank < 0 || opts.rank >= opts.world_size)
    detail::throw_invalid(c, "rank must be in [0, world_size)");
  const at::Device device = resolve_device(opts.cuda_device < 0 ? "cuda" : "cuda:" + std::to_string(opts.cuda_device));
  return std::make_unique<NcclBackend>(opts.store, opts.rank, opts.world_size, opts.timeout, device);
}

}  // namespace ddp::nccl
