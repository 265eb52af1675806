// ddp's DDP on the problem of ddp_interop.py; rank 0 compares its parameters
// after the last step with PyTorch's (file argv[1]) and fails on any
// difference. Both run the same ATen kernels (one thread each) on the same
// inputs; at world 2 every reduction adds the same two values, and PowerSGD
// draws the same random Q (NumPy's MT19937 seeds a CPU generator) and runs the
// same sequence of kernels, so the results are equal to the bit by
// construction, on any CPU (0 on AVX-512 and on AVX2 paths). The bucket layout
// PyTorch used is compared too: PowerSGD's results depend on it.
// Usage: ddp_interop PYTHON_PARAMS_FILE [HOOK STEPS]
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

namespace {

std::string shape_of(const at::Tensor& t) {
  std::string s;
  for (int64_t d : t.sizes()) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: ddp_interop PYTHON_PARAMS_FILE [HOOK STEPS]\n");
    return 2;
  }
  const std::string hook = argc == 4 ? argv[2] : "none";
  const int steps = argc == 4 ? std::atoi(argv[3]) : 5;
  auto g = ddp::init_process_group();
  torch::nn::Sequential model;
  if (hook == "none") {
    model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
  } else {
    model =
        torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::Tanh(), torch::nn::Linear(32, 32), torch::nn::Tanh(),
                              torch::nn::Linear(32, 32), torch::nn::Tanh(), torch::nn::Linear(32, 4));
  }
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : model->parameters()) {
      p.copy_((at::sin(at::arange(p.numel(), at::kFloat) * 0.37 + k) * 0.3).reshape(p.sizes()));
      ++k;
    }
  }
  ddp::DistributedDataParallel ddp_model(model);  // PyTorch's default bucket sizes
  if (hook != "none") ddp_model.register_comm_hook(ddp::make_comm_hook(hook));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
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
    std::vector<std::string> theirs_layout, mine_layout;
    for (const auto& names : ddp_model.bucket_parameter_names()) {
      std::string b;
      for (const auto& n : names) b += (b.empty() ? "" : ";") + shape_of(named[n]);
      mine_layout.push_back(b);
    }
    double worst = 0;
    size_t seen = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream s(line);
      std::string name;
      s >> name;
      if (name == "bucket") {
        std::string layout;
        s >> layout;
        theirs_layout.push_back(layout);
        continue;
      }
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
    if (hook != "none" && theirs_layout != mine_layout) {
      std::fprintf(stderr, "bucket layouts differ: PyTorch's %zu buckets vs our %zu\n", theirs_layout.size(),
                   mine_layout.size());
      for (const auto& b : theirs_layout) std::fprintf(stderr, "  theirs: %s\n", b.c_str());
      for (const auto& b : mine_layout) std::fprintf(stderr, "  ours:   %s\n", b.c_str());
      rc = 1;
    }
    std::printf("%s, %d steps: compared %zu parameters with PyTorch's DDP: largest difference %.3g\n", hook.c_str(),
                steps, seen, worst);
    if (seen != named.size() || worst != 0) rc = 1;
  }
  ddp::destroy_process_group();
  return rc;
}
