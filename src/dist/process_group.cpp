// The front of every process group: checks, timeouts, packing of lists and what
// a backend lacks, written once over detail::Backend (backend_impl.h).
#include "ddp/dist/process_group.h"

#include "ddp/dist/half.h"

#include <ATen/ATen.h>

#include "dist/agreement.h"
#include "dist/backend_impl.h"
#include "dist/device_scope.h"
#include "dist/exit_abort.h"
#include "dist/pack.h"
#include "dist/sequencer.h"
#include "dist/staging.h"
#include "dist/validate.h"
#include "dist/wait_report.h"

namespace ddp {

using detail::Call;
using detail::Flat;

namespace {
// Where the backend gathers host tensors itself, the call check is cheap and on by default (agreement.h).
CallCheck default_check(const detail::Backend& b) {
  return detail::default_call_check(b.device_for(OpType::kAllGather, at::Device(at::kCPU)).is_cpu());
}
}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<detail::Backend> backend, Milliseconds timeout)
    : impl_(detail::with_staging(std::move(backend))),
      exit_abort_(impl_->aborts_at_exit() ? std::make_unique<detail::ExitAbort>([impl = impl_.get()] { impl->abort(); })
                                          : nullptr),
      timeout_(timeout),
      rank_(impl_->rank()),
      size_(impl_->size()),
      name_(impl_->name()),
      check_(default_check(*impl_)),
      sequencer_(detail::sequencer_enabled() ? std::make_shared<detail::Sequencer>() : nullptr) {}

ProcessGroup::~ProcessGroup() = default;

Call ProcessGroup::call(OpType op, const CollectiveOptions& opts, const at::Tensor& payload) const {
  const Milliseconds t = detail::effective_timeout(opts.timeout, timeout_);
  Call c{ErrorContext{name_, rank_, size_, to_string(op)}, t.count() > 0 ? t : kNoTimeout, opts.async_op};
  c.op = op;
  if (is_p2p(op)) c.seq = seq_.load();  // collectives are numbered as issued (issue)
  c.bytes = payload.defined() ? static_cast<int64_t>(payload.nbytes()) : 0;
  return c;
}

void ProcessGroup::agree(const Call& c, const at::Tensor& t, int reduce_op, int root) const {
  detail::check_agreement(*impl_, c, t, reduce_op, root, check_.load());
}

bool ProcessGroup::supports(ReduceOp op) const {
  const bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  return !bitwise || impl_->has_bitwise();
}

at::Device ProcessGroup::device() const { return impl_->device_for(OpType::kAllReduce, at::Device(at::kCPU)); }

void ProcessGroup::check_reduction(const Call& c, ReduceOp op, at::ScalarType dtype) const {
  detail::check_op(c.ctx, op, dtype);
  if (!supports(op))
    throw_invalid(c.ctx, name_ + " has no " + to_string(op) + " (bitwise) reduction; use gloo or mpi for it");
}

void ProcessGroup::count(const at::Tensor& payload) {
  if (payload.defined()) bytes_.fetch_add(static_cast<int64_t>(payload.nbytes()), std::memory_order_relaxed);
}

// A synchronous call returns only once done: errors surface here.
Work ProcessGroup::finish(Work w, const Call& c) const {
  if (!c.async) {
    detail::WaitScope waiting(c);  // long waits are reported (heartbeat.h)
    w.wait(c.timeout);
  }
  return w;
}

// Hands a checked call to the backend in the group's order (sequencer.h): at once, or, while continuations are
// queued, behind them (the caller gets a Work now). `launch` runs then: it checks agreement (CallCheck)
// and calls the backend. `value`: what the returned Work yields.
Work ProcessGroup::issue(Call c, std::function<Work(const Call&)> launch, const at::Tensor& value) {
  auto run = [this, launch = std::move(launch), value](Call& c) {
    if (!is_p2p(c.op)) c.seq = ++seq_;  // collectives, numbered in issue order
    // Armed after the first call, failed or not: its device is in use, so its runtime's exit handler came first
    // (exit_abort.h).
    auto arm = [this] {
      if (exit_abort_) exit_abort_->arm();
    };
    Work w;
    try {
      w = launch(c);
    } catch (...) {
      arm();
      throw;
    }
    arm();
    if (value.defined()) w.set_value(value);
    return w.bind(sequencer_);
  };
  if (!sequencer_ || !sequencer_->must_queue()) {
    Work w = run(c);
    return finish(std::move(w), c);
  }
  detail::Promise promise;
  promise.queued_on(*sequencer_);
  Work w = promise.work();
  if (value.defined()) w.set_value(value);
  w.bind(sequencer_);
  // The entry holds the group: a group released meanwhile is destroyed only after its queue ran.
  sequencer_->post(to_string(c.op), [self = shared_from_this(), run, c, promise, value,
                                     stream = detail::caller_stream(value)]() mutable {
    try {
      detail::StreamScope on(stream);  // issued on the sequencer's thread: the caller's device and stream current
      c.async = true;                  // the caller waits (on the promise), not the sequencer
      promise.set_work(run(c));
    } catch (...) {
      promise.set_error(std::current_exception());
    }
  });
  return finish(std::move(w), c);
}

namespace {

// For a reduction: the buffer the backend reduces (a float32 copy where it cannot
// reduce the dtype), the op it runs (SUM for an AVG it lacks), and what follows.
struct Reduction {
  at::Tensor buffer;
  ReduceOp op;
  bool divide = false;
};

Reduction plan(const detail::Backend& b, const at::Tensor& t, ReduceOp op) {
  Reduction r{t, op};
  if (!b.can_reduce(t.scalar_type())) r.buffer = t.to(at::kFloat);
  if (op == ReduceOp::AVG && !b.has_avg()) {
    r.op = ReduceOp::SUM;
    r.divide = true;
  }
  return r;
}

// Adds the steps after the backend's reduction: AVG's division and the copy back.
void complete(Work& w, const Reduction& r, const at::Tensor& target, int world) {
  if (!r.divide && r.buffer.is_same(target)) return;
  w.on_success([buffer = r.buffer, target, divide = r.divide, world]() mutable {
    if (divide) buffer.div_(world);
    if (!buffer.is_same(target)) target.copy_(buffer);
  });
}

}  // namespace

Work ProcessGroup::broadcast(at::Tensor& t, const BroadcastOptions& o) {
  Call c = call(OpType::kBroadcast, o, t);
  detail::check_tensor(c.ctx, t, "tensor");
  detail::check_rank(c.ctx, o.src, "src");
  return issue(
      c,
      [this, t, src = o.src](const Call& c) mutable {
        agree(c, t, -1, src);
        if (t.numel() == 0) return Work();  // shapes match on every rank: nothing to move
        count(t);
        return impl_->broadcast(t, src, c);
      },
      t);
}

Work ProcessGroup::all_reduce(at::Tensor& t, const AllReduceOptions& o) {
  Call c = call(OpType::kAllReduce, o, t);
  detail::check_tensor(c.ctx, t, "tensor");
  check_reduction(c, o.op, t.scalar_type());
  return issue(
      c,
      [this, t, op = o.op](const Call& c) mutable {
        agree(c, t, static_cast<int>(op));
        if (t.numel() == 0) return Work();
        const bool is_16bit = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
        if (is_16bit && size_ == 1 && !impl_->can_reduce(t.scalar_type())) {  // nothing to add: no float32 round trip
          count(t);
          return Work();
        }
        if (is_16bit && size_ > 1 && !impl_->can_reduce(t.scalar_type()) &&
            (op == ReduceOp::SUM || op == ReduceOp::AVG))
          return all_reduce_16bit(t, op, c);
        Reduction r = plan(*impl_, t, op);
        count(r.buffer);
        Work w = impl_->all_reduce(r.buffer, r.op, c);
        complete(w, r, t, size_);
        return w;
      },
      t);
}

Work ProcessGroup::all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o) {
  Call c = call(OpType::kAllReduceCoalesced, o);
  int64_t numel = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    detail::check_tensor(c.ctx, ts[i], "tensors[" + std::to_string(i) + "]");
    check_reduction(c, o.op, ts[i].scalar_type());
    numel += ts[i].numel();
    c.bytes += static_cast<int64_t>(ts[i].nbytes());
  }
  return issue(c, [this, ts, numel, op = o.op](const Call& c) {
    // Compared: the dtype of the first tensor, the count of tensors and of elements.
    if (check_.load() != CallCheck::kOff)
      agree(c, at::empty({static_cast<int64_t>(ts.size()), numel}, ts.empty() ? at::kFloat : ts[0].scalar_type()),
            static_cast<int>(op));
    std::vector<Work> works;
    for (const auto& indices : detail::group_by_dtype(ts)) {
      std::vector<at::Tensor> group = detail::select(ts, indices);
      Flat flat = detail::flatten(group, /*fill=*/true);
      if (flat.buffer.numel() == 0) continue;
      Reduction r = plan(*impl_, flat.buffer, op);
      Call inner = c;
      inner.async = true;  // one wait for all of them
      count(r.buffer);
      Work w = impl_->all_reduce(r.buffer, r.op, inner);
      complete(w, r, flat.buffer, size_);
      if (!flat.aliased) w.on_success([flat, group] { detail::unflatten(flat, group); });
      works.push_back(std::move(w));
    }
    return combine(std::move(works));
  });
}

Work ProcessGroup::reduce(at::Tensor& t, const ReduceOptions& o) {
  Call c = call(OpType::kReduce, o, t);
  detail::check_tensor(c.ctx, t, "tensor");
  check_reduction(c, o.op, t.scalar_type());
  detail::check_rank(c.ctx, o.dst, "dst");
  return issue(
      c,
      [this, t, op = o.op, dst = o.dst](const Call& c) {
        agree(c, t, static_cast<int>(op), dst);
        if (t.numel() == 0) return Work();
        Reduction r = plan(*impl_, t, op);
        Work w = impl_->reduce(r.buffer, r.op, dst, c);
        if (rank_ == dst) complete(w, r, t, size_);
        return w;
      },
      t);
}

Work ProcessGroup::all_gather(std::vector<at::Tensor>& outs, const at::Tensor& in, const CollectiveOptions& o) {
  Call c = call(OpType::kAllGather, o, in);
  detail::check_tensor(c.ctx, in, "input");
  detail::check_list(c.ctx, outs, "outputs", size_, in, "input");
  return issue(c, [this, outs, in](const Call& c) {
    agree(c, in);
    if (in.numel() == 0) return Work();
    Flat out = detail::flatten(outs, /*fill=*/false, in);
    count(in);
    Work w = impl_->all_gather(out.buffer, in, c);
    if (!out.aliased) w.on_success([out, outs] { detail::unflatten(out, outs); });
    return w;
  });
}

Work ProcessGroup::gather(const at::Tensor& in, std::vector<at::Tensor>& outs, const GatherOptions& o) {
  Call c = call(OpType::kGather, o, in);
  detail::check_tensor(c.ctx, in, "input");
  detail::check_rank(c.ctx, o.dst, "dst");
  const bool at_root = rank_ == o.dst;  // other ranks' outputs are ignored
  if (at_root) detail::check_list(c.ctx, outs, "outputs", size_, in, "input");
  return issue(c, [this, in, outs, at_root, dst = o.dst](const Call& c) {
    agree(c, in, -1, dst);
    if (in.numel() == 0) return Work();
    Flat out = at_root ? detail::flatten(outs, /*fill=*/false, in) : Flat{at::Tensor(), true};
    Work w = impl_->gather(out.buffer, in, dst, c);
    if (!out.aliased) w.on_success([out, outs] { detail::unflatten(out, outs); });
    return w;
  });
}

Work ProcessGroup::scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const ScatterOptions& o) {
  Call c = call(OpType::kScatter, o, out);
  detail::check_tensor(c.ctx, out, "output");
  detail::check_rank(c.ctx, o.src, "src");
  const bool at_root = rank_ == o.src;  // other ranks' inputs are ignored
  if (at_root) detail::check_list(c.ctx, ins, "inputs", size_, out, "output");
  return issue(
      c,
      [this, out, ins, at_root, src = o.src](const Call& c) mutable {
        agree(c, out, -1, src);
        if (out.numel() == 0) return Work();
        at::Tensor in = at_root ? detail::flatten(ins, /*fill=*/true, out).buffer : at::Tensor();
        return impl_->scatter(out, in, src, c);
      },
      out);
}

Work ProcessGroup::reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const ReduceScatterOptions& o) {
  Call c = call(OpType::kReduceScatter, o, out);
  detail::check_tensor(c.ctx, out, "output");
  check_reduction(c, o.op, out.scalar_type());
  detail::check_list(c.ctx, ins, "inputs", size_, out, "output");
  return issue(
      c,
      [this, out, ins, op = o.op](const Call& c) mutable {
        agree(c, out, static_cast<int>(op));
        if (out.numel() == 0) return Work();
        at::Tensor in = detail::flatten(ins, /*fill=*/true, out).buffer;
        if (!impl_->has_reduce_scatter()) return reduce_scatter_via_all_to_all(out, in, op, c);
        // Reduced in float32 where the backend cannot reduce the dtype.
        const bool widen = !impl_->can_reduce(out.scalar_type());
        Reduction r = plan(*impl_, out, op);
        at::Tensor send = widen ? in.to(at::kFloat) : in;
        count(send);
        Work w = impl_->reduce_scatter(r.buffer, send, r.op, c);
        complete(w, r, out, size_);
        return w;
      },
      out);
}

// 16-bit floats a backend cannot add (gloo): block r of every rank's tensor goes to
// rank r (all_to_all), which adds the blocks in float32 and rounds once; then every
// rank gathers the reduced blocks (all_gather). As many 16-bit bytes move as in a
// ring all_reduce, none widened. The gather is a continuation: it starts by itself
// when the all_to_all completes, in its place in the group's order (sequencer.h).
Work ProcessGroup::all_reduce_16bit(at::Tensor& t, ReduceOp op, const Call& c) {
  const int64_t n = t.numel(), world = size_, block = (n + world - 1) / world;
  at::Tensor flat = at::zeros({block * world}, t.options());  // padded to W blocks
  flat.narrow(0, 0, n).copy_(t.reshape({-1}));
  at::Tensor recv = at::empty_like(flat);
  const std::vector<int64_t> counts(size_t(world), block);
  count(t);
  Call phase = c;
  phase.async = true;
  Work exchange = impl_->all_to_all(recv, counts, flat, counts, phase);
  // Asynchronous: the gather is a continuation of the group (in order, by itself). Synchronous: it runs as the
  // caller waits, right away (a continuation calling this synchronously must not queue behind itself).
  if (c.async && sequencer_) exchange.bind(sequencer_);
  return exchange.then([self = shared_from_this(), t, flat, recv, n, block, world, op, phase](at::Tensor) mutable {
    at::Tensor sum = recv.view({world, block}).to(at::kFloat).sum(0);
    at::Tensor mine = to_16bit(sum, t.scalar_type(), op == ReduceOp::AVG ? double(world) : 1.0);
    self->impl_->all_gather(flat, mine, phase).wait(phase.timeout);
    t.copy_(flat.narrow(0, 0, n).view(t.sizes()));
    return t;
  });
}

// Block r of every rank's inputs goes to rank r (all_to_all), which reduces the
// blocks it received locally, in rank order (float32 for half and bfloat16).
Work ProcessGroup::reduce_scatter_via_all_to_all(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) {
  const int64_t n = out.numel();
  const std::vector<int64_t> counts(size_t(size_), n);
  at::Tensor recv = at::empty_like(in);
  at::Tensor send = in;
  count(send);
  Work w = impl_->all_to_all(recv, counts, send, counts, c);
  const int world = size_;
  w.on_success([recv, out, n, world, op]() mutable {
    at::Tensor blocks = recv.view({world, n});
    if (blocks.scalar_type() == at::kHalf || blocks.scalar_type() == at::kBFloat16) blocks = blocks.to(at::kFloat);
    at::Tensor acc = blocks[0].clone();
    for (int r = 1; r < world; ++r) detail::reduce_into(acc, blocks[r], op);
    if (op == ReduceOp::AVG) acc.div_(world);
    out.view({-1}).copy_(acc);
  });
  return w;
}

Work ProcessGroup::all_to_all(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins,
                              const CollectiveOptions& o) {
  Call c = call(OpType::kAllToAll, o);
  if (ins.empty())
    throw_invalid(c.ctx, "inputs is empty; expected " + std::to_string(size_) + " tensors (one per rank)");
  detail::check_list_dtype(c.ctx, ins, "inputs", size_, ins[0], "inputs[0]");
  detail::check_list_dtype(c.ctx, outs, "outputs", size_, ins[0], "inputs[0]");
  std::vector<int64_t> in_counts, out_counts;
  for (const auto& t : ins) in_counts.push_back(t.numel());
  for (const auto& t : outs) out_counts.push_back(t.numel());
  Flat in = detail::flatten(ins, /*fill=*/true);
  Flat out = detail::flatten(outs, /*fill=*/false, in.buffer);
  c.bytes = static_cast<int64_t>(in.buffer.nbytes());
  return issue(c, [this, ins, in, out, outs, in_counts, out_counts](const Call& c) mutable {
    agree(c, ins[0]);  // the dtype only: sizes may differ per rank
    count(in.buffer);
    Work w = impl_->all_to_all(out.buffer, out_counts, in.buffer, in_counts, c);
    w.on_success([in, out, outs] { detail::unflatten(out, outs); });  // `in` lives until the end
    return w;
  });
}

Work ProcessGroup::barrier(const CollectiveOptions& o) {
  Call c = call(OpType::kBarrier, o);
  return issue(c, [this](const Call& c) {
    agree(c, at::Tensor());
    return impl_->barrier(c);
  });
}

namespace {
void check_peer(const Call& c, int peer, const char* name, int tag, int max_tag) {
  detail::check_rank(c.ctx, peer, name);
  if (tag < 0 || tag > max_tag)
    throw_invalid(c.ctx, "tag " + std::to_string(tag) + " is out of range [0, " + std::to_string(max_tag) + "]");
  if (peer == c.ctx.rank)
    throw_invalid(c.ctx, std::string(name) + " " + std::to_string(peer) + " is this rank" +
                             (c.ctx.size == 1 ? "; a world of one has no peer" : "; name another rank"));
}
}  // namespace

Work ProcessGroup::send(const at::Tensor& t, int dst, const P2POptions& o) {
  Call c = call(OpType::kSend, o, t);
  detail::check_tensor(c.ctx, t, "tensor");
  check_peer(c, dst, "dst", o.tag, impl_->max_tag());
  return issue(c, [this, t, dst, tag = o.tag](const Call& c) { return impl_->send(t, dst, tag, c); });
}

Work ProcessGroup::recv(at::Tensor& t, int src, const P2POptions& o) {
  Call c = call(OpType::kRecv, o, t);
  detail::check_tensor(c.ctx, t, "tensor");
  check_peer(c, src, "src", o.tag, impl_->max_tag());
  return issue(
      c, [this, t, src, tag = o.tag](const Call& c) mutable { return impl_->recv(t, src, tag, c); }, t);
}

void ProcessGroup::await_turn() {
  if (!sequencer_ || !sequencer_->must_queue()) return;
  detail::Promise turn;
  turn.queued_on(*sequencer_);
  sequencer_->post("new_group", [turn]() mutable { turn.set_value({}); });
  turn.work().wait(timeout_.count() > 0 ? timeout_ : kNoTimeout);
}

GroupPtr ProcessGroup::new_group(const std::vector<int>& ranks) {
  Call c = call(OpType::kNewGroup, {});
  detail::check_group_ranks(c.ctx, ranks);
  await_turn();  // what it exchanges comes after every collective called before it
  c.seq = ++seq_;
  if (check_.load() != CallCheck::kOff)
    agree(c, at::tensor(std::vector<int64_t>(ranks.begin(), ranks.end()), at::kLong));
  const int index = detail::index_in(ranks, rank_);
  std::unique_ptr<detail::Backend> sub = impl_->split(ranks, index, timeout_);
  if (index < 0) return nullptr;
  return std::make_shared<ProcessGroup>(std::move(sub), timeout_);
}

}  // namespace ddp
