// A world of one: every collective is a no-op or a local copy (the front has
// checked the arguments as for any other backend).
#include <ATen/ATen.h>

#include "dist/local/local.h"

namespace ddp::local {
namespace {

using detail::Call;

class LocalBackend final : public detail::Backend {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool has_avg() const override { return true; }  // the average of one value is itself
  bool has_reduce_scatter() const override { return true; }
  at::Device device_for(OpType, const at::Device& where) const override { return where; }  // copies anywhere

  Work broadcast(at::Tensor&, int, const Call&) override { return Work(); }
  Work all_reduce(at::Tensor&, ReduceOp, const Call&) override { return Work(); }
  Work reduce(at::Tensor&, ReduceOp, int, const Call&) override { return Work(); }
  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call&) override { return copy(out, in); }
  Work gather(at::Tensor& out, const at::Tensor& in, int, const Call&) override { return copy(out, in); }
  Work scatter(at::Tensor& out, const at::Tensor& in, int, const Call&) override { return copy(out, in); }
  Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp, const Call&) override { return copy(out, in); }
  Work all_to_all(at::Tensor& out, const std::vector<int64_t>&, const at::Tensor& in, const std::vector<int64_t>&,
                  const Call&) override {
    return copy(out, in);
  }
  Work barrier(const Call&) override { return Work(); }
  // The front rejects every peer of a world of one before these are called.
  Work send(const at::Tensor&, int, int, const Call& c) override { throw Error(c.ctx.prefix() + "no peer"); }
  Work recv(at::Tensor&, int, int, const Call& c) override { throw Error(c.ctx.prefix() + "no peer"); }
  std::unique_ptr<Backend> split(const std::vector<int>&, int, Milliseconds) override {
    return std::make_unique<LocalBackend>();
  }

 private:
  static Work copy(at::Tensor& out, const at::Tensor& in) {
    if (!out.is_same(in)) out.view({-1}).copy_(in.view({-1}));
    return Work();
  }
};

}  // namespace

bool is_available() { return true; }

std::unique_ptr<detail::Backend> create(const BackendOptions& opts) {
  if (opts.world_size != 1 || opts.rank != 0)
    throw InvalidArgument("[local] rank " + std::to_string(opts.rank) + "/" + std::to_string(opts.world_size) +
                          " init: the local backend is a world of one; use gloo or mpi for " +
                          std::to_string(opts.world_size) + " ranks");
  return std::make_unique<LocalBackend>();
}

}  // namespace ddp::local
