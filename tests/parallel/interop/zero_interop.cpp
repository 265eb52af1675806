// ddp's ZeRO-1 on the problem of zero_interop.py (DDP + Adam, 10 steps, world
// 2); rank 0 writes {"model", "optimizer": the consolidated state} in
// torch.save's format for the script to compare with PyTorch's. Both run the
// same kernels on the same inputs and every reduction adds two values, so
// equality is exact. Usage: zero_interop OUT_FILE
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/version.h>

#include <cstdio>

#include "ddp/ddp.h"
#include "ddp/train/checkpoint.h"

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: zero_interop OUT_FILE\n");
    return 2;
  }
  auto g = ddp::init_process_group();
  torch::nn::Sequential model(torch::nn::Linear(8, 24), torch::nn::Tanh(), torch::nn::Linear(24, 12), torch::nn::Tanh(),
                              torch::nn::Linear(torch::nn::LinearOptions(12, 4).bias(false)));
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : model->parameters()) {
      p.copy_((at::sin(at::arange(p.numel(), at::kFloat) * 0.37 + k) * 0.3).reshape(p.sizes()));
      ++k;
    }
  }
  ddp::DistributedDataParallel ddp_model(model);
  ddp::ZeroRedundancyOptimizer opt(model->parameters(), [](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(0.01).betas({0.8, 0.99}).weight_decay(0.01));
  });
  for (int step = 0; step < 10; ++step) {
    at::Tensor x = at::cos(at::arange(6 * 8, at::kFloat) * 0.13 + step * 5 + g->rank() * 3).reshape({6, 8});
    at::Tensor y = (at::arange(6, at::kLong) + step + g->rank()).remainder(4);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(ddp_model(x), y).backward();
    opt.step();
  }
  opt.consolidate_state_dict(0);
  if (g->rank() == 0) {
    c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
    out.insert("model", ddp::train::state_dict_to_ivalue(ddp::train::state_dict(*model)));
    out.insert("optimizer", opt.state_dict());
    out.insert("libtorch", std::string(TORCH_VERSION));  // how exactly Python's Adam can match (torch_adam.py)
    ddp::train::save_atomic(out, argv[1]);
  }
  ddp::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "zero_interop: %s\n", e.what());
  return 1;
}
