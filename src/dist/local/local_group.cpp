// A world of one: every collective validates its arguments like the other
// backends, then is a no-op or a local copy.
#include <ATen/ATen.h>

#include "ddp/dist/local/local.h"
#include "dist/validate.h"

namespace ddp::local {
namespace {

class LocalGroup final : public ProcessGroup {
 public:
  explicit LocalGroup(Milliseconds timeout) : timeout_(timeout) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  Milliseconds timeout() const override { return timeout_; }

  Work broadcast(at::Tensor& t, const BroadcastOptions& o) override {
    auto c = ctx("broadcast");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, o.root, "root");
    return Work();
  }
  Work all_reduce(at::Tensor& t, const AllReduceOptions& o) override {
    auto c = ctx("all_reduce");
    detail::check_tensor(c, t, "tensor");
    detail::check_op(c, o.op, t.scalar_type());
    return Work();
  }
  Work all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o) override {
    auto c = ctx("all_reduce_coalesced");
    for (size_t i = 0; i < ts.size(); ++i) {
      detail::check_tensor(c, ts[i], "tensors[" + std::to_string(i) + "]");
      detail::check_op(c, o.op, ts[i].scalar_type());
    }
    return Work();
  }
  Work reduce(at::Tensor& t, const ReduceOptions& o) override {
    auto c = ctx("reduce");
    detail::check_tensor(c, t, "tensor");
    detail::check_op(c, o.op, t.scalar_type());
    detail::check_rank(c, o.root, "root");
    return Work();
  }
  Work all_gather(std::vector<at::Tensor>& outs, const at::Tensor& in,
                  const CollectiveOptions&) override {
    auto c = ctx("all_gather");
    detail::check_tensor(c, in, "input");
    detail::check_list(c, outs, "outputs", 1, in, "input");
    outs[0].copy_(in);
    return Work();
  }
  Work gather(std::vector<at::Tensor>& outs, const at::Tensor& in, const RootOptions& o) override {
    auto c = ctx("gather");
    detail::check_tensor(c, in, "input");
    detail::check_rank(c, o.root, "root");
    detail::check_list(c, outs, "outputs", 1, in, "input");
    outs[0].copy_(in);
    return Work();
  }
  Work scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, const RootOptions& o) override {
    auto c = ctx("scatter");
    detail::check_tensor(c, out, "output");
    detail::check_rank(c, o.root, "root");
    detail::check_list(c, ins, "inputs", 1, out, "output");
    out.copy_(ins[0]);
    return Work();
  }
  Work reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins,
                      const ReduceScatterOptions& o) override {
    auto c = ctx("reduce_scatter");
    detail::check_tensor(c, out, "output");
    detail::check_op(c, o.op, out.scalar_type());
    detail::check_list(c, ins, "inputs", 1, out, "output");
    out.copy_(ins[0]);
    return Work();
  }
  Work all_to_all(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins,
                  const CollectiveOptions&) override {
    auto c = ctx("all_to_all");
    if (ins.empty()) detail::throw_invalid(c, "inputs is empty; expected 1 tensor (one per rank)");
    detail::check_list_dtype(c, ins, "inputs", 1, ins[0], "inputs[0]");
    detail::check_list(c, outs, "outputs", 1, ins[0], "inputs[0]");
    outs[0].copy_(ins[0]);
    return Work();
  }
  Work barrier(const CollectiveOptions&) override { return Work(); }
  Work send(const at::Tensor& t, int dst, const P2POptions&) override {
    auto c = ctx("send");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, dst, "dst");
    detail::throw_invalid(c, "dst 0 is this rank; a world of one has no peer to send to");
  }
  Work recv(at::Tensor& t, int src, const P2POptions&) override {
    auto c = ctx("recv");
    detail::check_tensor(c, t, "tensor");
    detail::check_rank(c, src, "src");
    detail::throw_invalid(c, "src 0 is this rank; a world of one has no peer to receive from");
  }
  GroupPtr new_group(const std::vector<int>& ranks) override {
    auto c = ctx("new_group");
    detail::check_group_ranks(c, ranks);
    return std::make_shared<LocalGroup>(timeout_);
  }

 private:
  ErrorContext ctx(const char* op) const { return {"local", 0, 1, op}; }
  Milliseconds timeout_;
};

}  // namespace

bool is_available() { return true; }

GroupPtr create(const BackendOptions& opts) {
  if (opts.world_size != 1 || opts.rank != 0)
    throw InvalidArgument("[local] rank " + std::to_string(opts.rank) + "/" +
                          std::to_string(opts.world_size) +
                          " init: the local backend is a world of one; use gloo or mpi for " +
                          std::to_string(opts.world_size) + " ranks");
  return std::make_shared<LocalGroup>(opts.timeout);
}

}  // namespace ddp::local
