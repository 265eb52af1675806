#include "support/nccl_standin.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>

#include "ddp/dist/errors.h"
#include "dist/backend_impl.h"

namespace ddp::testing {
namespace {

using detail::Call;

std::atomic<int> g_aborts{0};

bool is_16bit(const at::Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

class NcclStandIn final : public detail::Backend {
 public:
  explicit NcclStandIn(std::unique_ptr<detail::Backend> in) : in_(std::move(in)) {}

  std::string name() const override { return "nccl-standin"; }
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  bool can_reduce(at::ScalarType) const override { return true; }  // NCCL reduces float16 and bfloat16 itself
  bool has_avg() const override { return true; }
  bool has_bitwise() const override { return false; }
  bool has_reduce_scatter() const override { return true; }
  int max_tag() const override { return in_->max_tag() - 1; }  // the top tag: the receives' go-aheads
  at::Device device_for(OpType op, const at::Device& where) const override { return in_->device_for(op, where); }

  Work broadcast(at::Tensor& buf, int root, const Call& c) override {
    return at_wait(buf, [&](at::Tensor& t) { return in_->broadcast(t, root, c); });
  }
  // What gloo cannot (AVG, 16-bit sums) is done here, as one reduction of the dtype, the way NCCL does it.
  Work all_reduce(at::Tensor& buf, ReduceOp op, const Call& c) override {
    return at_wait(buf, [&](at::Tensor& t) {
      at::Tensor wide = is_16bit(t) ? t.to(at::kFloat) : t;
      return settle(in_->all_reduce(wide, inner(op), c), wide, t, op);
    });
  }
  Work reduce(at::Tensor& buf, ReduceOp op, int root, const Call& c) override {
    return at_wait(buf, [&](at::Tensor& t) {
      at::Tensor wide = is_16bit(t) ? t.to(at::kFloat) : t;
      Work w = in_->reduce(wide, inner(op), root, c);
      return rank() == root ? settle(std::move(w), wide, t, op) : w;
    });
  }
  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) override {
    return at_wait(out, [&](at::Tensor& t) { return in_->all_gather(t, in, c); });
  }
  Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    return at_wait(out, [&](at::Tensor& t) { return in_->gather(t, in, root, c); });
  }
  Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    return at_wait(out, [&](at::Tensor& t) { return in_->scatter(t, in, root, c); });
  }
  // Native for the front: here an all_reduce of the whole input, of which this rank keeps its block.
  Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) override {
    at::Tensor whole = in.to(is_16bit(in) ? at::kFloat : in.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    at::Tensor mine = whole.view({size(), -1})[rank()];
    return at_wait(out, [&](at::Tensor& t) { return settle(in_->all_reduce(whole, inner(op), c), mine, t, op); });
  }
  Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                  const std::vector<int64_t>& in_counts, const Call& c) override {
    return at_wait(out, [&](at::Tensor& t) { return in_->all_to_all(t, out_counts, in, in_counts, c); });
  }
  Work barrier(const Call& c) override { return in_->barrier(c); }
  // Point to point in NCCL's order: a pair's sends and receives run one after another (one queue: the GPU's
  // stream for that pair), and a send completes once the peer's receive has started (its go-ahead, a message on
  // the reserved tag). So ranks of a pair that both send first, or both receive first, hang (until the call's
  // timeout) as on a GPU, where gloo alone would buffer the sends.
  Work send(const at::Tensor& buf, int dst, int tag, const Call& c) override {
    return in_turn(dst, [this, buf, dst, tag, c] {
      Work data = in_->send(buf, dst, tag, c);
      at::Tensor go = at::empty({1}, at::kInt);
      in_->recv(go, dst, in_->max_tag(), c).wait(c.timeout);
      data.wait(c.timeout);
    });
  }
  Work recv(at::Tensor& buf, int src, int tag, const Call& c) override {
    return at_wait(buf, [&](at::Tensor& t) {
      return in_turn(src, [this, t, src, tag, c]() mutable {
        Work told = in_->send(at::ones({1}, at::kInt), src, in_->max_tag(), c);  // started: src's send may complete
        in_->recv(t, src, tag, c).wait(c.timeout);
        told.wait(c.timeout);
      });
    });
  }
  std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) override {
    auto sub = in_->split(ranks, index, timeout);
    return sub ? std::make_unique<NcclStandIn>(std::move(sub)) : nullptr;
  }
  std::unique_ptr<detail::BeatChannel> beat_channel() override { return in_->beat_channel(); }
  // As nccl's: a group alive at exit is aborted before static destructors (dist/exit_abort.h); counted here.
  bool aborts_at_exit() const override { return true; }
  void abort() override { g_aborts.fetch_add(1); }

 private:
  static ReduceOp inner(ReduceOp op) { return op == ReduceOp::AVG ? ReduceOp::SUM : op; }
  // The result lands in `out` when the Work is waited for, as a CPU tensor staged through nccl's GPU does (a
  // device tensor's lands in stream order): whoever reads a result before waiting reads stale values here.
  template <typename Fn>
  static Work at_wait(at::Tensor& out, Fn&& fn) {
    if (!out.defined() || out.numel() == 0) return fn(out);
    at::Tensor tmp = out.clone();
    Work w = fn(tmp);
    w.on_success([tmp, out]() mutable { out.copy_(tmp); });
    return w;
  }
  // After the reduction: AVG's division and the rounding back to 16 bits, once each, into `target` (at_wait's
  // buffer), by itself on a thread here, as the GPU's kernels would, whether or not anyone waits.
  Work settle(Work w, at::Tensor result, at::Tensor target, ReduceOp op) {
    const int world = size();
    if (op != ReduceOp::AVG && result.is_same(target)) return w;
    return Work(std::make_shared<Landing>(std::async(std::launch::async, [w, result, target, op, world]() mutable {
                                            w.wait();
                                            if (op == ReduceOp::AVG) result.div_(world);
                                            if (!result.is_same(target)) target.view({-1}).copy_(result.reshape({-1}));
                                          }).share()));
  }
  // Completes when the thread that lands the result is done; rethrows its error.
  class Landing final : public Work::Impl {
   public:
    explicit Landing(std::shared_future<void> f) : done_(std::move(f)) {}
    bool is_completed() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
    void wait(Milliseconds timeout) override {
      if (timeout != kNoTimeout && done_.wait_for(timeout) != std::future_status::ready)
        throw TimeoutError("nccl-standin: a reduction did not land within its timeout");
      done_.get();
    }

   private:
    std::shared_future<void> done_;
  };

  // `op` once this rank's earlier point-to-point call with `peer` ended (its error is its own caller's). Ordered on
  // the calls' futures, not on their Works (waiting a Work would land its result early); what a call holds (its
  // predecessor, its buffers) is let go once it ran, so no chain of finished calls stays alive.
  Work in_turn(int peer, std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_future<void> before = last_[peer];
    std::shared_future<void> now = std::async(std::launch::async, [before, op]() mutable {
                                     if (before.valid()) before.wait();
                                     before = std::shared_future<void>();
                                     std::function<void()> run = std::move(op);
                                     op = nullptr;
                                     run();
                                   }).share();
    last_[peer] = now;
    return Work(std::make_shared<Landing>(now));
  }

  std::unique_ptr<detail::Backend> in_;
  std::mutex mu_;
  std::map<int, std::shared_future<void>> last_;  // per peer: this rank's last point-to-point call with it
};

}  // namespace

int nccl_standin_aborts() { return g_aborts.load(); }

GroupPtr make_nccl_standin(const BackendOptions& opts) {
  auto impl = std::make_unique<NcclStandIn>(detail::create_backend_impl("gloo", opts));
  GroupPtr g = std::make_shared<ProcessGroup>(std::move(impl), opts.timeout);
  if (g->call_check() == CallCheck::kHash) g->set_call_check(CallCheck::kOff);  // nccl's default
  return g;
}

}  // namespace ddp::testing
