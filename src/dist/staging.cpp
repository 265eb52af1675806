#include "dist/staging.h"

#include <ATen/ATen.h>

#include "dist/error_context.h"

namespace ddp::detail {
namespace {

class Staging final : public Backend {
 public:
  explicit Staging(std::unique_ptr<Backend> in) : in_(std::move(in)) {}

  std::string name() const override { return in_->name(); }
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  bool can_reduce(at::ScalarType dtype) const override { return in_->can_reduce(dtype); }
  bool has_avg() const override { return in_->has_avg(); }
  bool has_bitwise() const override { return in_->has_bitwise(); }
  bool has_reduce_scatter() const override { return in_->has_reduce_scatter(); }
  int max_tag() const override { return in_->max_tag(); }
  at::Device device_for(OpType op, const at::Device& where) const override { return in_->device_for(op, where); }
  bool aborts_at_exit() const override { return in_->aborts_at_exit(); }
  void abort() override { in_->abort(); }

  Work broadcast(at::Tensor& buf, int root, const Call& c) override {
    at::Tensor s = there(c, OpType::kBroadcast, buf);
    return back(in_->broadcast(s, root, c), s, buf);
  }
  Work all_reduce(at::Tensor& buf, ReduceOp op, const Call& c) override {
    at::Tensor s = there(c, OpType::kAllReduce, buf);
    return back(in_->all_reduce(s, op, c), s, buf);
  }
  Work reduce(at::Tensor& buf, ReduceOp op, int root, const Call& c) override {
    at::Tensor s = there(c, OpType::kReduce, buf);
    return back(in_->reduce(s, op, root, c), s, buf);
  }
  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) override {
    at::Tensor so = there(c, OpType::kAllGather, out, /*copy=*/false);
    return back(in_->all_gather(so, there(c, OpType::kAllGather, in), c), so, out);
  }
  Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    at::Tensor so = there(c, OpType::kGather, out, /*copy=*/false);
    return back(in_->gather(so, there(c, OpType::kGather, in), root, c), so, out);
  }
  Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override {
    at::Tensor so = there(c, OpType::kScatter, out, /*copy=*/false);
    return back(in_->scatter(so, there(c, OpType::kScatter, in), root, c), so, out);
  }
  Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) override {
    at::Tensor so = there(c, OpType::kReduceScatter, out, /*copy=*/false);
    return back(in_->reduce_scatter(so, there(c, OpType::kReduceScatter, in), op, c), so, out);
  }
  Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                  const std::vector<int64_t>& in_counts, const Call& c) override {
    at::Tensor so = there(c, OpType::kAllToAll, out, /*copy=*/false);
    return back(in_->all_to_all(so, out_counts, there(c, OpType::kAllToAll, in), in_counts, c), so, out);
  }
  Work barrier(const Call& c) override { return in_->barrier(c); }
  Work send(const at::Tensor& buf, int dst, int tag, const Call& c) override {
    return in_->send(there(c, OpType::kSend, buf), dst, tag, c);
  }
  Work recv(at::Tensor& buf, int src, int tag, const Call& c) override {
    at::Tensor s = there(c, OpType::kRecv, buf, /*copy=*/false);
    return back(in_->recv(s, src, tag, c), s, buf);
  }
  std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) override {
    return in_->split(ranks, index, timeout);  // the front wraps the new group's backend again
  }

 private:
  // `t` where the backend runs `op`: itself, or a buffer there (holding t's values when `copy`, as an input).
  // The copies are synchronous: a buffer staged from a GPU holds its values once the copy returns.
  at::Tensor there(const Call& c, OpType op, const at::Tensor& t, bool copy = true) const {
    if (!t.defined()) return t;
    const at::Device d = in_->device_for(op, t.device());
    if (d == t.device()) return t;
    if (t.is_meta())
      throw_invalid(c.ctx, "a tensor is on meta (no data); the " + in_->name() + " backend takes CPU and CUDA tensors");
    return copy ? t.to(d) : at::empty_like(t, t.options().device(d));
  }
  // After success, the staged result goes back into the caller's buffer.
  static Work back(Work w, const at::Tensor& staged, const at::Tensor& target) {
    if (staged.defined() && !staged.is_same(target)) w.on_success([staged, target]() mutable { target.copy_(staged); });
    return w;
  }

  std::unique_ptr<Backend> in_;
};

}  // namespace

std::unique_ptr<Backend> with_staging(std::unique_ptr<Backend> backend) {
  return std::make_unique<Staging>(std::move(backend));
}

}  // namespace ddp::detail
