// ddp's DDP on the problem of ddp_interop.py; rank 0 compares its parameters
// after 5 steps with PyTorch's (file argv[1]) and fails on any difference: both
// run the same ATen kernels (one thread each) on the same inputs, and both
// reductions add the same two gradients and divide by 2, so the results are
// equal to the bit by construction, on any CPU (0 on AVX-512 and on AVX2 paths).
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ddp/ddp.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ddp_interop PYTHON_PARAMS_FILE\n");
    return 2;
  }
  auto g = ddp::init_process_group();
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
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
  for (int step = 0; step < 5; ++step) {
    at::Tensor x = at::cos(at::arange(4 * 8, at::kFloat) * 0.11 + step * 7 + g->rank() * 3).reshape({4, 8});
    at::Tensor y = (at::arange(4, at::kLong) + step + g->rank()).remainder(4);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp_model(x), y).backward();
    opt.step();
  }
  int rc = 0;
  if (g->rank() == 0) {
    std::ifstream in(argv[1]);
    auto named = model->named_parameters();
    double worst = 0;
    size_t seen = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream s(line);
      std::string name;
      s >> name;
      std::vector<float> values;
      for (double v; s >> v;) values.push_back(static_cast<float>(v));
      const at::Tensor* mine = named.find(name);
      if (!mine || mine->numel() != static_cast<int64_t>(values.size())) {
        std::fprintf(stderr, "parameter %s: missing or wrong size\n", name.c_str());
        return 1;
      }
      at::Tensor theirs = at::tensor(values).reshape(mine->sizes());
      worst = std::max(worst, (*mine - theirs).abs().max().item<double>());
      ++seen;
    }
    std::printf("compared %zu parameters with PyTorch's DDP: largest difference %.3g\n", seen, worst);
    rc = (seen == named.size() && worst == 0) ? 0 : 1;
  }
  ddp::destroy_process_group();
  return rc;
}
