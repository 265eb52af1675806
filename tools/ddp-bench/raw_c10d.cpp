// The gloo baseline: c10d's ProcessGroupGloo called directly on the same
// buffers, the way PyTorch's torch.distributed calls it (a default device,
// one c10d call and wait() per operation), timed like ours. PyTorch's Python
// layer runs on top of exactly this, so it can only add to these times.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>

#include "bench.h"

namespace ddp::bench {

struct RawGloo {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

std::shared_ptr<RawGloo> make_raw_gloo(const StorePtr& store, int rank, int size) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto raw = std::make_shared<RawGloo>();
  raw->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(make_prefix_store("raw_c10d/", store), rank, size, opts);
  return raw;
}

double raw_gloo_time_us(RawGloo& raw, const std::string& op, at::Tensor& in, at::Tensor& out, long long count,
                        int iters) {
  c10d::ProcessGroupGloo& pg = *raw.pg;
  const int w = pg.getSize();
  std::vector<at::Tensor> outs{out};
  std::vector<std::vector<at::Tensor>> parts{out.chunk(w)};
  std::vector<at::Tensor> input{in.narrow(0, 0, count / w)};
  auto once = [&] {
    if (op == "all_reduce")
      pg.allreduce(outs)->wait();
    else if (op == "broadcast")
      pg.broadcast(outs)->wait();
    else if (op == "all_gather")
      pg.allgather(parts, input)->wait();
  };
  once();  // warm-up
  pg.barrier()->wait();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::vector<at::Tensor> t{at::full({1}, us, at::kDouble)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  pg.allreduce(t, max)->wait();
  return t[0].item<double>();
}

}  // namespace ddp::bench
