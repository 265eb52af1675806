// The gloo backend: c10d's ProcessGroupGloo on flat buffers. What it lacks in
// 1.13 the front supplies (AVG, reductions of bfloat16, reduce_scatter);
// bfloat16 moves as 2-byte Half payload.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>

#include "dist/c10d_work.h"
#include "dist/gloo/gloo.h"
#include "dist/gloo/gloo_device.h"
#include "dist/validate.h"

namespace ddp::gloo {
namespace {

using PG = c10d::ProcessGroupGloo;
using c10d_work::call;
using c10d_work::current_message;
using c10d_work::HealthPtr;
using detail::Call;
using Clock = std::chrono::steady_clock;
// c10d has no "forever": a call without a timeout gets a year.
constexpr std::chrono::milliseconds kNoTimeoutForC10d = std::chrono::hours(24 * 365);

// c10d's gloo has no AVG: it sums, and the front divides.
c10d::ReduceOp to_c10d(ReduceOp op) { return c10d_work::to_c10d(op == ReduceOp::AVG ? ReduceOp::SUM : op); }

// Gloo moves bytes of these dtypes but cannot reduce bfloat16: such tensors
// travel as Half (same size) and are reduced in float32.
at::Tensor wire(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

class GlooBackend final : public detail::Backend {
 public:
  GlooBackend(StorePtr store, int rank, int size, Milliseconds timeout, std::string host,
              std::function<bool()> given_up = nullptr)
      : store_(std::move(store)), rank_(rank), size_(size), host_(std::move(host)), device_(make_device(host_)) {
    health_->given_up = std::move(given_up);
    auto opts = PG::Options::create(timeout);
    opts->devices.push_back(device_);
    ErrorContext c{"gloo", rank, size, "init"};
    try {
      pg_ = c10::make_intrusive<PG>(store_, rank, size, opts);
    } catch (...) {
      throw Error(c.prefix() + "rendezvous with the other ranks failed: " + current_message());
    }
    barrier_after_connecting(c, timeout);
  }

  // After a timed-out operation, or in a group its members gave up, c10d's destructor would join a worker thread
  // that may stay blocked until the group's own timeout (minutes): waiting for a peer that left the collective,
  // or for one itself stuck in such a join. The c10d group is left to the process's end instead.
  ~GlooBackend() override {
    if (health_->abandoned()) (void)pg_.release();
  }

  std::string name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Gloo adds float16 one element at a time in software (2.5x slower than float32
  // end to end) and bfloat16 not at all: the front reduces both (ProcessGroup::all_reduce_16bit).
  bool can_reduce(at::ScalarType dtype) const override { return dtype != at::kBFloat16 && dtype != at::kHalf; }
  // c10d's gloo reduces and broadcasts CUDA tensors itself (through pinned host memory, on its own streams, as
  // PyTorch's DDP uses it); its other collectives take CPU tensors only.
  at::Device device_for(OpType op, const at::Device& where) const override {
    const bool native = where.is_cuda() && (op == OpType::kAllReduce || op == OpType::kBroadcast);
    return native ? where : at::Device(at::kCPU);
  }

  Work broadcast(at::Tensor& t, int root, const Call& c) override {
    c10d::BroadcastOptions co;
    co.rootRank = root;
    co.timeout = c10d_timeout(c);
    std::vector<at::Tensor> v{wire(t)};
    return run(c, [&] { return pg_->broadcast(v, co); });
  }

  Work all_reduce(at::Tensor& t, ReduceOp op, const Call& c) override {
    c10d::AllreduceOptions co;
    co.reduceOp = to_c10d(op);
    co.timeout = c10d_timeout(c);
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->allreduce(v, co); });
  }

  Work reduce(at::Tensor& t, ReduceOp op, int root, const Call& c) override {
    c10d::ReduceOptions co;
    co.reduceOp = to_c10d(op);
    co.rootRank = root;
    co.timeout = c10d_timeout(c);
    std::vector<at::Tensor> v{t};
    return run(c, [&] { return pg_->reduce(v, co); });
  }

  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) override {
    c10d::AllgatherOptions co;
    co.timeout = c10d_timeout(c);
    std::vector<std::vector<at::Tensor>> outs{blocks(out, in)};
    std::vector<at::Tensor> inv{wire(in)};
    return run(c, [&] { return pg_->allgather(outs, inv, co); });
  }

  Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    c10d::GatherOptions co;
    co.rootRank = root;
    co.timeout = c10d_timeout(c);
    std::vector<std::vector<at::Tensor>> outs;
    if (out.defined()) outs.push_back(blocks(out, in));
    std::vector<at::Tensor> inv{wire(in)};
    return run(c, [&] { return pg_->gather(outs, inv, co); });
  }

  Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    c10d::ScatterOptions co;
    co.rootRank = root;
    co.timeout = c10d_timeout(c);
    std::vector<std::vector<at::Tensor>> ins;
    if (in.defined()) ins.push_back(blocks(in, out));
    std::vector<at::Tensor> outv{wire(out)};
    return run(c, [&] { return pg_->scatter(outv, ins, co); });
  }

  Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                  const std::vector<int64_t>& in_counts, const Call& c) override {
    c10d::AllToAllOptions co;
    co.timeout = c10d_timeout(c);
    at::Tensor recv = wire(out), send = wire(in);
    std::vector<int64_t> oc = out_counts, ic = in_counts;
    return run(c, [&] { return pg_->alltoall_base(recv, send, oc, ic, co); });
  }

  Work barrier(const Call& c) override {
    c10d::BarrierOptions co;
    co.timeout = c10d_timeout(c);
    return run(c, [&] { return pg_->barrier(co); });
  }

  Work send(const at::Tensor& t, int dst, int tag, const Call& c) override {
    std::vector<at::Tensor> v{wire(t)};
    return run(c, [&] { return pg_->send(v, dst, tag); });
  }

  Work recv(at::Tensor& t, int src, int tag, const Call& c) override {
    std::vector<at::Tensor> v{wire(t)};
    return run(c, [&] { return pg_->recv(v, src, tag); });
  }

  // Every rank's connections are up before any rank returns: gloo's connectFullMesh can finish on one side of a
  // pair first, and a rank that then exited at once (a job that only initializes) closed the pair while its peer
  // was still completing it ("Connection closed by peer" there); PyTorch 1.13 had a store barrier here. Then rank
  // 0, whose process may hold the store, returns last: every other rank is past its last store request.
  void barrier_after_connecting(const ErrorContext& c, Milliseconds timeout) {
    const auto deadline = timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
    auto keys = [&](const char* step) {
      std::vector<std::string> k;
      for (int r = 0; r < size_; ++r) k.push_back(std::string("ddp_gloo_") + step + "/" + std::to_string(r));
      return k;
    };
    try {
      store_->set(keys("connected")[size_t(rank_)], std::vector<uint8_t>{1});
      wait_for(keys("connected"), deadline, c, timeout);
      store_->set(keys("passed")[size_t(rank_)], std::vector<uint8_t>{1});
      if (rank_ == 0) wait_for(keys("passed"), deadline, c, timeout);
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw Error(c.prefix() + "the store failed while the ranks checked that all had connected: " + current_message());
    }
  }

  // Until every key is set, polling (a few ms in all when the ranks are together); the group's members giving it
  // up (a rebuild after a lost member) or the deadline ends the wait with an error.
  void wait_for(const std::vector<std::string>& keys, Clock::time_point deadline, const ErrorContext& c,
                Milliseconds timeout) {
    const auto start = Clock::now();
    auto pause = std::chrono::milliseconds(1);
    while (!store_->check(keys)) {
      if (Clock::now() - start > std::chrono::milliseconds(100) && health_->given_up_now())
        throw CommError(c.prefix() + "the members gave this group up while its ranks connected");
      if (Clock::now() >= deadline)
        throw TimeoutError(c.prefix() + "the other ranks did not all connect within the timeout (" +
                           std::to_string(timeout.count()) + " ms)");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) override {
    // Every rank counts groups in the same order, so keys agree.
    std::string prefix = "ddp_group_" + std::to_string(next_group_++) + "/";
    if (index < 0) return nullptr;
    // A device of its own, as PyTorch does: groups share no transport state.
    return std::make_unique<GlooBackend>(make_prefix_store(prefix, store_), index, static_cast<int>(ranks.size()),
                                         timeout, host_, health_->given_up);
  }

 private:
  template <typename Fn>
  Work run(const Call& c, Fn&& fn) {
    return call(c.ctx, health_, std::forward<Fn>(fn));
  }
  static std::chrono::milliseconds c10d_timeout(const Call& c) {
    return c.timeout.count() > 0 ? c.timeout : kNoTimeoutForC10d;
  }
  // size() blocks of a flat buffer shaped like `like`, as c10d's list arguments.
  std::vector<at::Tensor> blocks(const at::Tensor& flat, const at::Tensor& like) const {
    std::vector<at::Tensor> out;
    for (auto& b : wire(flat).chunk(size_)) out.push_back(b.view(like.sizes()));
    return out;
  }

  StorePtr store_;
  int rank_, size_;
  std::string host_;
  std::shared_ptr<::gloo::transport::Device> device_;
  c10::intrusive_ptr<PG> pg_;
  HealthPtr health_ = std::make_shared<c10d_work::Health>();
  int next_group_ = 0;
};

// gloo writes to its peers' sockets without MSG_NOSIGNAL: a write to a peer that died raises SIGPIPE, whose default
// action ends this rank silently, before it can report the lost peer (Python, and so PyTorch, ignores SIGPIPE from
// the start). A program that left SIGPIPE at its default gets EPIPE instead, which gloo reports as an error.
void ignore_default_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0)
    std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

bool is_available() { return true; }

std::unique_ptr<detail::Backend> create(const BackendOptions& opts) {
  ErrorContext c{"gloo", opts.rank, opts.world_size, "init"};
  if (!opts.store) detail::throw_invalid(c, "no store to rendezvous on");
  if (opts.world_size < 1 || opts.rank < 0 || opts.rank >= opts.world_size)
    detail::throw_invalid(c, "rank must be in [0, world_size)");
  ignore_default_sigpipe();
  return std::make_unique<GlooBackend>(opts.store, opts.rank, opts.world_size, opts.timeout, opts.host, opts.given_up);
}

}  // namespace ddp::gloo
