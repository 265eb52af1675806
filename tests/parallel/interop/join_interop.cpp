// ddp::Join on the problem of join_interop.py (rank r trains on 3 + 2r
// batches); rank 0 compares its parameters and buffers after finish() with
// PyTorch's after Join's exit (file argv[1]) and fails beyond TOLERANCE.
// Both run the same ATen kernels on the same inputs. At world 2 every
// reduction adds the same two values (one of them 0 from a joined rank) and
// both divisions (PyTorch multiplies by 1/d, ddp divides by d; d = 1 or 2)
// are exact: equal to the bit (TOLERANCE 0). At worlds 3-4 the three or four
// terms of a sum may be added in another order than PyTorch's, and 1/3 is
// rounded: each averaged gradient element (|g| < 0.1) may differ by a few ulps,
// ~5e-8; through 9 steps of lr 0.1 with momentum 0.9 (an update carries a
// gradient at most sum 0.9^k <= 10 times) parameters move apart by at most
// 9 x 10 x 0.1 x 5e-8 ~ 5e-7: TOLERANCE 1e-6. Plain DDP (no Join) against
// PyTorch's at world 3-4 differs the same way (2.98e-8: ddp_interop, 9 steps).
// The comparison can tell: ours dividing by the active ranks against PyTorch
// dividing by the initial world size differs by 0.022 at world 2.
// Usage: join_interop PYTHON_FILE DIVIDE(initial|active) MODEL(mlp|bn) TOLERANCE
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "ddp/ddp.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: join_interop PYTHON_FILE initial|active mlp|bn TOLERANCE\n");
    return 2;
  }
  const std::string divide = argv[2], kind = argv[3];
  const double tolerance = std::atof(argv[4]);
  auto g = ddp::init_process_group();
  torch::nn::Sequential model;
  if (kind == "bn")
    model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::Tanh(),
                                  torch::nn::Linear(16, 4));
  else
    model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : model->parameters()) {
      p.copy_((at::sin(at::arange(p.numel(), at::kFloat) * 0.37 + k) * 0.3).reshape(p.sizes()));
      ++k;
    }
  }
  ddp::DistributedDataParallel ddp_model(model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ddp::JoinOptions jo;
  jo.divide_by_initial_world_size = divide == "initial";
  ddp::Join join(ddp_model, jo);
  for (int step = 0; step < 3 + 2 * g->rank(); ++step) {
    at::Tensor x = at::cos(at::arange(4 * 8, at::kFloat) * 0.11 + step * 7 + g->rank() * 3).reshape({4, 8});
    at::Tensor y = (at::arange(4, at::kLong) + step + g->rank()).remainder(4);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp_model(x), y).backward();
    opt.step();
  }
  join.finish();
  int rc = 0;
  if (g->rank() == 0) {
    std::ifstream in(argv[1]);
    auto named = model->named_parameters();
    for (const auto& b : model->named_buffers()) named.insert(b.key(), b.value());
    double worst = 0;
    size_t seen = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream s(line);
      std::string name;
      s >> name;
      std::vector<double> values;
      for (double v; s >> v;) values.push_back(v);
      const at::Tensor* mine = named.find(name);
      if (!mine || mine->numel() != static_cast<int64_t>(values.size())) {
        std::fprintf(stderr, "%s: missing or wrong size\n", name.c_str());
        return 1;
      }
      at::Tensor theirs = at::tensor(values, at::kDouble).to(mine->scalar_type()).reshape(mine->sizes());
      worst = std::max(worst, (*mine - theirs).abs().max().item<double>());
      ++seen;
    }
    std::printf(
        "world %d, divide by %s world size, %s: compared %zu tensors with PyTorch's Join: largest "
        "difference %.3g (tolerance %g)\n",
        g->size(), divide == "initial" ? "initial" : "active", kind.c_str(), seen, worst, tolerance);
    if (seen != named.size() || worst > tolerance) rc = 1;
  }
  ddp::destroy_process_group();
  return rc;
}
