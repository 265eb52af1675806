// ZeRO-3: FullyShardedDataParallel trains an MLP whose parameters, gradients
// and Adam state are split across the ranks; each Linear layer is a unit,
// gathered only while it runs. At the end the ranks save a sharded checkpoint
// and rank 0 prints the memory one rank held against what DDP would hold.
//
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/zero3
//   build/bin/ddprun --nproc-per-node 4 --standalone build/bin/zero3 --steps 100 --save /tmp/zero3-ckpt
//
// Prints, on rank 0 (world 2):
//   step  20 | loss 2.2373
//   step  40 | loss 2.0077
//   step  60 | loss 1.9656
//   4 units, 1.06M parameters; per rank: parameters 2.12 MB (peak 4.22 MB), gradients 2.12 MB,
//   Adam state 4.24 MB; DDP holds 4.24 + 4.24 + 8.47 MB
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "ddp/data/synthetic.h"
#include "ddp/ddp.h"
#include "ddp/dist/error_file.h"

int main(int argc, char** argv) try {
  int64_t steps = 60;
  std::string save;
  CLI::App app("ZeRO-3 (FullyShardedDataParallel) with Adam", "zero3");
  app.add_option("--steps", steps)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--save", save, "write a sharded checkpoint to this directory, then load it back");
  CLI11_PARSE(app, argc, argv);

  auto g = ddp::init_process_group();
  ddp::ClassificationOptions d;
  d.n_samples = 4096;
  d.n_features = 256;
  d.n_informative = 64;
  d.n_classes = 16;
  auto data = ddp::make_classification(d);

  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(256, 1024), torch::nn::Tanh(), torch::nn::Linear(1024, 512),
                            torch::nn::Tanh(), torch::nn::Linear(512, 512), torch::nn::Tanh(),
                            torch::nn::Linear(512, 16));
  ddp::FullyShardedDataParallel model(net);                                     // ZeRO-3: FullShard
  torch::optim::Adam opt(model.parameters(), torch::optim::AdamOptions(1e-3));  // this rank's shards

  for (int64_t step = 1; step <= steps; ++step) {
    const int64_t i = ((step * g->size() + g->rank()) * 64) % (d.n_samples - 64);  // this rank's batch
    at::Tensor x = data.x.narrow(0, i, 64), y = data.y.narrow(0, i, 64);
    opt.zero_grad();
    at::Tensor loss = torch::nn::functional::cross_entropy(model(x), y);
    loss.backward();  // each unit is gathered again, then its gradients reduce-scattered
    opt.step();       // steps this rank's shards only
    if (g->rank() == 0 && step % 20 == 0) std::printf("step %3lld | loss %.4f\n", (long long)step, loss.item<double>());
  }

  const ddp::FSDPMemory m = model.memory();
  const int64_t state = ddp::optimizer_state_bytes(opt);
  int64_t params = 0;
  for (const auto& item : model.full_state_dict()) params += item.value().numel();  // collective: every rank
  if (!save.empty()) {
    model.save_sharded(save, &opt);  // each rank writes its shards; load_sharded reshards at any world size
    model.load_sharded(save, &opt);
  }
  if (g->rank() == 0)
    std::printf(
        "%zu units, %.2fM parameters; per rank: parameters %.2f MB (peak %.2f MB), gradients %.2f MB,\n"
        "Adam state %.2f MB; DDP holds %.2f + %.2f + %.2f MB\n",
        model.num_units(), params / 1e6, m.parameter_bytes / 1e6, m.peak_parameter_bytes / 1e6, m.gradient_bytes / 1e6,
        state / 1e6, params * 4 / 1e6, params * 4 / 1e6, params * 8 / 1e6);
  ddp::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  ddp::record_error(e);  // for ddprun's summary (TORCHELASTIC_ERROR_FILE)
  std::fprintf(stderr, "zero3: %s\n", e.what());
  return 1;
}
