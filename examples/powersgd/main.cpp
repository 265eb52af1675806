// PowerSGD: DDP sends low-rank factors of each gradient instead of the
// gradient. Two identical models train side by side on the same batches, one
// with plain all_reduce and one with PowerSGD, and the example prints what
// each sent and how their losses compare.
//
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/powersgd
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/powersgd --rank 1 --start 20
//
// Prints, on rank 0 (world 2):
//   step  20 | loss allreduce 2.3531 | loss powersgd 2.3987
//   ...
//   step 100 | loss allreduce 1.0221 | loss powersgd 1.4681
//   bytes per step: allreduce 1605632, powersgd 37120 (43.3x fewer); compression rate 43.3
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <CLI/CLI.hpp>

#include <cstdio>

#include "ddp/data/synthetic.h"
#include "ddp/ddp.h"
#include "ddp/dist/error_file.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/train/models/mlp.h"

int main(int argc, char** argv) try {
  ddp::PowerSGDOptions psgd;  // PyTorch's PowerSGDState options
  psgd.matrix_approximation_rank = 4;
  psgd.start_powerSGD_iter = 10;  // plain all_reduce first: early gradients are the most sensitive
  int64_t steps = 100;
  CLI::App app("DDP with and without PowerSGD on the same data", "powersgd");
  app.add_option("--rank", psgd.matrix_approximation_rank, "matrix_approximation_rank")->check(CLI::Range(1, 1 << 30));
  app.add_option("--start", psgd.start_powerSGD_iter, "start_powerSGD_iter")->check(CLI::Range(2, 1 << 30));
  app.add_option("--steps", steps)->check(CLI::Range(1, 1 << 30))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto g = ddp::init_process_group();
  ddp::ClassificationOptions d;
  d.n_samples = 4096;
  d.n_features = 256;
  d.n_informative = 64;
  d.n_classes = 16;
  auto data = ddp::make_classification(d);

  auto make = [] {
    torch::manual_seed(0);
    return ddp::models::MLP(ddp::models::MLPOptions{3, 256, 512, 16});
  };
  auto plain_net = make(), psgd_net = make();
  ddp::DistributedDataParallel plain(plain_net), compressed(psgd_net);
  auto hook = std::make_shared<ddp::PowerSGDHook>(psgd);
  compressed.register_comm_hook(hook);  // the only line PowerSGD needs
  torch::optim::SGD opt_plain(plain_net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD opt_psgd(psgd_net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  int64_t bytes_plain = 0, bytes_psgd = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const int64_t i = ((step * g->size() + g->rank()) * 64) % (d.n_samples - 64);  // this rank's batch
    at::Tensor x = data.x.narrow(0, i, 64), y = data.y.narrow(0, i, 64);
    double losses[2];
    int k = 0;
    for (auto [model, opt, bytes] :
         {std::tuple{&plain, &opt_plain, &bytes_plain}, std::tuple{&compressed, &opt_psgd, &bytes_psgd}}) {
      opt->zero_grad();
      at::Tensor loss = torch::nn::functional::cross_entropy((*model)(x), y);
      const int64_t before = g->traffic().bytes;
      loss.backward();  // the gradients are reduced here, by the hook if one is registered
      if (step > psgd.start_powerSGD_iter) *bytes += g->traffic().bytes - before;
      opt->step();
      losses[k++] = loss.item<double>();
    }
    if (g->rank() == 0 && step % 20 == 0)
      std::printf("step %3lld | loss allreduce %.4f | loss powersgd %.4f\n", (long long)step, losses[0], losses[1]);
  }
  if (g->rank() == 0 && steps > psgd.start_powerSGD_iter) {
    const double n = double(steps - psgd.start_powerSGD_iter);
    std::printf("bytes per step: allreduce %.0f, powersgd %.0f (%.1fx fewer); compression rate %.1f\n", bytes_plain / n,
                bytes_psgd / n, double(bytes_plain) / double(std::max<int64_t>(1, bytes_psgd)),
                hook->state().compression_rate());
  }
  ddp::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  ddp::record_error(e);  // for ddprun's summary (TORCHELASTIC_ERROR_FILE)
  std::fprintf(stderr, "powersgd: %s\n", e.what());
  return 1;
}
