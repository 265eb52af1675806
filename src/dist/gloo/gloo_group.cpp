// The gloo backend: c10d's ProcessGroupGloo, with what it lacks in 1.13 built
// on top: AVG (SUM, then divide), bfloat16 (reduced in float32, moved as
// 2-byte payload), reduce_scatter (all_to_all, then a local reduction).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <ATen/ATen.h>

#include "ddp/dist/gloo/gloo.h"
#include "dist/coalesce.h"
#include "dist/gloo/gloo_device.h"
#include "dist/gloo/gloo_work.h"
#include "dist/validate.h"

namespace ddp::gloo {
namespace {

using PG = c10d::ProcessGroupGloo;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: case ReduceOp::AVG: return c10d::ReduceOp::SUM;
    case ReduceOp::PRODUCT: return c10d::ReduceOp::PRODUCT;
    case ReduceOp::MIN: return c10d::ReduceOp::MIN;
    case ReduceOp::MAX: return c10d::ReduceOp::MAX;
    case ReduceOp::BAND: return c10d::ReduceOp::BAND;
    case ReduceOp::BOR: return c10d::ReduceOp::BOR;
    case ReduceOp::BXOR: return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

// Gloo moves bytes of these dtypes but cannot reduce bfloat16: such tensors
// travel as Half (same size) and are reduced in float32.
at::Tensor wire(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }
bool needs_float(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16; }

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(StorePtr store, int rank, int size, Milliseconds timeout, std::string host)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), host_(std::move(host)),
        device_(make_device(host_)) {
    auto opts = PG::Options::create(timeout);
    opts->devices.push_back(device_);
    try {
      pg_ = c10::make_intrusive<PG>(store_, rank, size, opts);
    } catch (...) {
      ErrorContext c{"gloo", rank, size, "init"};
      throw Error(c.prefix() + "rendezvous with the other ranks failed: " + current_message());
    }
  }

  // After a timed-out operation, c10d's destructor would join a worker thread
  // that stays blocked until the group's own timeout (minutes): the process
  // could not exit. The c10d group is left to the process's end instead.
  ~GlooGroup() override {
    if (broken_->load()) (void)pg_.release();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  Milliseconds timeout() const override { return timeout_; }

  Work broadcast(at::Tensor& t, const BroadcastOptions& o) override {
    auto c = ctx("broadcast");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, o.root, "root");
    if (t.numel() == 0) return Work();  // shapes match on all ranks: nothing to move
    c10d::BroadcastOptions co;
    co.rootRank = o.root;
    co.timeout = op_timeout(o);
    std::vector<at::Tensor> v{wire(t)};
    return finish(call(c, broken_, [&] { return pg_->broadcast(v, co); }), o, timeout_);
  }

  Work all_reduce(at::Tensor& t, const AllReduceOptions& o) override {
    auto c = ctx("all_reduce");
    detail::check_tensor(c, t, "tensor");
    detail::check_op(c, o.op, t.scalar_type());
    if (t.numel() == 0) return Work();
    c10d::AllreduceOptions co;
    co.reduceOp = to_c10d(o.op);
    co.timeout = op_timeout(o);
    at::Tensor buf = needs_float(t) ? t.to(at::kFloat) : t;
    std::vector<at::Tensor> v{buf};
    Work w = call(c, broken_, [&] { return pg_->allreduce(v, co); });
    post_reduce(w, t, buf, o.op == ReduceOp::AVG);
    return finish(std::move(w), o, timeout_);
  }

  Work all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o) override {
    return detail::all_reduce_coalesced_flat(*this, ts, o);
  }

  Work reduce(at::Tensor& t, const ReduceOptions& o) override {
    auto c = ctx("reduce");
    detail::check_tensor(c, t, "tensor");
    detail::check_op(c, o.op, t.scalar_type());
    detail::check_rank(c, o.root, "root");
    if (t.numel() == 0) return Work();
    c10d::ReduceOptions co;
    co.reduceOp = to_c10d(o.op);
    co.rootRank = o.root;
    co.timeout = op_timeout(o);
    at::Tensor buf = needs_float(t) ? t.to(at::kFloat) : t;
    std::vector<at::Tensor> v{buf};
    Work w = call(c, broken_, [&] { return pg_->reduce(v, co); });
    if (rank_ == o.root) post_reduce(w, t, buf, o.op == ReduceOp::AVG);
    return finish(std::move(w), o, timeout_);
  }

  Work all_gather(std::vector<at::Tensor>& outs, const at::Tensor& in,
                  const CollectiveOptions& o) override {
    auto c = ctx("all_gather");
    detail::check_tensor(c, in, "input");
    detail::check_list(c, outs, "outputs", size_, in, "input");
    if (in.numel() == 0) return Work();  // gloo divides by zero on empty tensors
    c10d::AllgatherOptions co;
    co.timeout = op_timeout(o);
    std::vector<std::vector<at::Tensor>> out{wires(outs)};
    std::vector<at::Tensor> inv{wire(in)};
    return finish(call(c, broken_, [&] { return pg_->allgather(out, inv, co); }), o, timeout_);
  }

  Work gather(std::vector<at::Tensor>& outs, const at::Tensor& in, const RootOptions& o) override {
    auto c = ctx("gather");
    detail::check_tensor(c, in, "input");
    detail::check_rank(c, o.root, "root");
    std::vector<std::vector<at::Tensor>> out;
    if (rank_ == o.root) {
      detail::check_list(c, outs, "outputs", size_, in, "input");
      out.push_back(wires(outs));
    }
    if (in.numel() == 0) return Work();
    c10d::GatherOptions co;
    co.rootRank = o.root;
    co.timeout = op_timeout(o);
    std::vector<at::Tensor> inv{wire(in)};
    return finish(call(c, broken_, [&] { return pg_->gather(out, inv, co); }), o, timeout_);
  }

  Work scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const RootOptions& o) override {
    auto c = ctx("scatter");
    detail::check_tensor(c, out, "output");
    detail::check_rank(c, o.root, "root");
    std::vector<std::vector<at::Tensor>> in;
    if (rank_ == o.root) {
      detail::check_list(c, ins, "inputs", size_, out, "output");
      in.push_back(wires(ins));
    }
    if (out.numel() == 0) return Work();
    c10d::ScatterOptions co;
    co.rootRank = o.root;
    co.timeout = op_timeout(o);
    std::vector<at::Tensor> outv{wire(out)};
    return finish(call(c, broken_, [&] { return pg_->scatter(outv, in, co); }), o, timeout_);
  }

  // Chunk r of every rank's inputs goes to rank r (all_to_all), which then
  // reduces the chunks it received locally, in rank order.
  Work reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins,
                      const ReduceScatterOptions& o) override {
    auto c = ctx("reduce_scatter");
    detail::check_tensor(c, out, "output");
    detail::check_op(c, o.op, out.scalar_type());
    detail::check_list(c, ins, "inputs", size_, out, "output");
    if (out.numel() == 0) return Work();
    std::vector<at::Tensor> flat;
    for (auto& t : ins) flat.push_back(t.reshape({-1}));
    at::Tensor send = wire(at::cat(flat));
    at::Tensor recv = at::empty_like(send);
    c10d::AllToAllOptions co;
    co.timeout = op_timeout(o);
    std::vector<int64_t> even;
    Work w = call(c, broken_, [&] { return pg_->alltoall_base(recv, send, even, even, co); });
    const int64_t n = out.numel();
    const int world = size_;
    const bool floaty = (out.scalar_type() == at::kHalf || out.scalar_type() == at::kBFloat16);
    const ReduceOp op = o.op;
    at::Tensor result = out;
    w.then([=]() mutable {
      at::Tensor chunks = recv.view(result.scalar_type()).view({world, n});
      if (floaty) chunks = chunks.to(at::kFloat);
      at::Tensor acc = chunks[0].clone();
      for (int r = 1; r < world; ++r) detail::reduce_into(acc, chunks[r], op);
      if (op == ReduceOp::AVG) acc.div_(world);
      result.view({-1}).copy_(acc);
    });
    return finish(std::move(w), o, timeout_);
  }

  Work all_to_all(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins,
                  const CollectiveOptions& o) override {
    auto c = ctx("all_to_all");
    if (ins.empty()) detail::throw_invalid(c, "inputs is empty; expected " + std::to_string(size_) + " tensors (one per rank)");
    const auto dtype = ins[0].scalar_type();
    detail::check_list_dtype(c, ins, "inputs", size_, ins[0], "inputs[0]");
    detail::check_list_dtype(c, outs, "outputs", size_, ins[0], "inputs[0]");
    std::vector<at::Tensor> flat;
    std::vector<int64_t> in_counts, out_counts;
    int64_t total_out = 0;
    for (auto& t : ins) {
      flat.push_back(t.reshape({-1}));
      in_counts.push_back(t.numel());
    }
    for (auto& t : outs) {
      out_counts.push_back(t.numel());
      total_out += t.numel();
    }
    at::Tensor send = wire(at::cat(flat));
    at::Tensor recv = wire(at::empty({total_out}, ins[0].options()));
    c10d::AllToAllOptions co;
    co.timeout = op_timeout(o);
    Work w = call(c, broken_, [&] { return pg_->alltoall_base(recv, send, out_counts, in_counts, co); });
    std::vector<at::Tensor> targets = outs;
    w.then([recv, targets, dtype]() mutable {
      at::Tensor r = recv.view(dtype);
      int64_t offset = 0;
      for (auto& t : targets) {
        t.view({-1}).copy_(r.narrow(0, offset, t.numel()));
        offset += t.numel();
      }
    });
    return finish(std::move(w), o, timeout_);
  }

  Work barrier(const CollectiveOptions& o) override {
    auto c = ctx("barrier");
    c10d::BarrierOptions co;
    co.timeout = op_timeout(o);
    return finish(call(c, broken_, [&] { return pg_->barrier(co); }), o, timeout_);
  }

  Work send(const at::Tensor& t, int dst, const P2POptions& o) override {
    auto c = ctx("send");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, dst, "dst");
    if (dst == rank_) detail::throw_invalid(c, "dst " + std::to_string(dst) + " is this rank");
    std::vector<at::Tensor> v{wire(t)};
    return finish(call(c, broken_, [&] { return pg_->send(v, dst, o.tag); }), o, timeout_);
  }

  Work recv(at::Tensor& t, int src, const P2POptions& o) override {
    auto c = ctx("recv");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, src, "src");
    if (src == rank_) detail::throw_invalid(c, "src " + std::to_string(src) + " is this rank");
    std::vector<at::Tensor> v{wire(t)};
    return finish(call(c, broken_, [&] { return pg_->recv(v, src, o.tag); }), o, timeout_);
  }

  GroupPtr new_group(const std::vector<int>& ranks) override {
    auto c = ctx("new_group");
    detail::check_group_ranks(c, ranks);
    // Every rank counts groups in the same order, so keys agree.
    std::string prefix = "ddp_group_" + std::to_string(next_group_++) + "/";
    int index = detail::index_in(ranks, rank_);
    if (index < 0) return nullptr;
    // A device of its own, as PyTorch does: groups share no transport state.
    return std::make_shared<GlooGroup>(make_prefix_store(prefix, store_), index,
                                       static_cast<int>(ranks.size()), timeout_, host_);
  }

 private:
  ErrorContext ctx(const char* op) const { return {"gloo", rank_, size_, op}; }
  Milliseconds op_timeout(const CollectiveOptions& o) const {
    return detail::effective_timeout(o.timeout, timeout_);
  }
  static std::vector<at::Tensor> wires(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    for (auto& t : ts) out.push_back(wire(t));
    return out;
  }
  // After a reduction into `buf`: AVG's division, and the copy back when
  // the reduction ran on a float32 copy of a bfloat16 tensor.
  void post_reduce(Work& w, const at::Tensor& t, const at::Tensor& buf, bool avg) {
    if (!avg && buf.is_same(t)) return;
    const int world = size_;
    w.then([t, buf, avg, world]() mutable {
      if (avg) buf.div_(world);
      if (!buf.is_same(t)) t.copy_(buf);
    });
  }

  StorePtr store_;
  int rank_, size_;
  Milliseconds timeout_;
  std::string host_;
  std::shared_ptr<::gloo::transport::Device> device_;
  c10::intrusive_ptr<PG> pg_;
  BrokenFlag broken_ = std::make_shared<std::atomic<bool>>(false);
  int next_group_ = 0;
};

}  // namespace

bool is_available() { return true; }

GroupPtr create(const BackendOptions& opts) {
  ErrorContext c{"gloo", opts.rank, opts.world_size, "init"};
  if (!opts.store) detail::throw_invalid(c, "no store to rendezvous on");
  if (opts.world_size < 1 || opts.rank < 0 || opts.rank >= opts.world_size)
    detail::throw_invalid(c, "rank must be in [0, world_size)");
  return std::make_shared<GlooGroup>(opts.store, opts.rank, opts.world_size, opts.timeout, opts.host);
}

}  // namespace ddp::gloo
