// ddp-bench memory: bytes of parameters, gradients and optimizer state one rank
// holds when training an MLP with Adam under DDP, ZeRO-1, ZeRO-2 or ZeRO-3,
// counted from the tensors, with the peak RSS and peak virtual memory.
//
//   ddprun --nproc-per-node 4 --standalone build/bin/ddp-bench memory --mode zero3
#include <ATen/ATen.h>
#include <sys/resource.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "bench.h"
#include "ddp/ddp.h"
#include "ddp/train/machine.h"

namespace ddp::bench {
namespace {

struct Options {
  std::string mode = "ddp";  // ddp | zero1 | zero2 | zero3
  std::string backend = "auto";
  int64_t width = 2048, layers = 4, dim_in = 1024, classes = 32;
  int steps = 3, batch = 32;
  std::string json;
};

// The wide MLP of ddp-bench ddp --model wide (models::MLP, hidden 2048: 10.5M
// parameters) as a Sequential, whose Linear layers are ZeRO-3's units.
torch::nn::Sequential make_mlp(const Options& o) {
  torch::nn::Sequential net;
  for (int64_t i = 0; i < o.layers; ++i) {
    const int64_t in = i == 0 ? o.dim_in : o.width, out = i + 1 == o.layers ? o.classes : o.width;
    net->push_back(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
    if (i + 1 < o.layers) net->push_back(torch::nn::Tanh());
  }
  return net;
}

int64_t bytes_of(const std::vector<at::Tensor>& ts, bool grads) {
  int64_t n = 0;
  for (const auto& t : ts) {
    const at::Tensor& x = grads ? t.grad() : t;
    if (x.defined()) n += x.nbytes();
  }
  return n;
}

// Peak virtual memory of this process (what ulimit -v limits), in bytes.
double vm_peak_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmPeak:", 0) == 0) return std::stod(line.substr(7)) * 1024.0;
  return 0;
}

struct Held {
  int64_t params = 0, peak_params = 0, grads = 0, state = 0;
};

int run_memory(const Options& o) {
  InitOptions init;
  init.backend = o.backend;
  auto g = init_process_group(init);
  torch::manual_seed(1);
  auto net = make_mlp(o);
  torch::manual_seed(2 + g->rank());
  const at::Tensor x = at::randn({o.batch, o.dim_in}), y = at::randint(o.classes, {o.batch}, at::kLong);
  const auto adam = [](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(1e-3));
  };
  auto loss_of = [&](const at::Tensor& logits) { return torch::nn::functional::cross_entropy(logits, y); };
  Held h;
  double loss = 0;
  int64_t total_params = 0;
  for (const auto& p : net->parameters()) total_params += p.numel();
  if (o.mode == "zero2" || o.mode == "zero3") {
    FSDPOptions f;
    f.sharding_strategy = o.mode == "zero3" ? ShardingStrategy::FullShard : ShardingStrategy::ShardGradOp;
    FullyShardedDataParallel model(net, f);
    torch::optim::Adam opt(model.parameters(), torch::optim::AdamOptions(1e-3));
    for (int s = 0; s < o.steps; ++s) {
      opt.zero_grad();
      at::Tensor l = loss_of(model(x));
      l.backward();
      h.grads = std::max(h.grads, model.memory().gradient_bytes);
      opt.step();
      loss = l.item<double>();
    }
    const FSDPMemory m = model.memory();
    h.params = m.parameter_bytes;
    h.peak_params = m.peak_parameter_bytes;
    h.state = optimizer_state_bytes(opt);
  } else {
    DistributedDataParallel<torch::nn::Sequential> model(net);
    std::unique_ptr<torch::optim::Optimizer> plain;
    std::unique_ptr<ZeroRedundancyOptimizer> zero;
    if (o.mode == "zero1")
      zero = std::make_unique<ZeroRedundancyOptimizer>(net->parameters(), adam);
    else
      plain = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-3));
    for (int s = 0; s < o.steps; ++s) {
      if (zero)
        zero->zero_grad();
      else
        plain->zero_grad();
      at::Tensor l = loss_of(model(x));
      l.backward();
      if (zero)
        zero->step();
      else
        plain->step();
      loss = l.item<double>();
    }
    h.params = h.peak_params = bytes_of(net->parameters(), false);
    h.grads = bytes_of(net->parameters(), true);
    h.state = zero ? zero->local_state_bytes() : optimizer_state_bytes(*plain);
  }
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  at::Tensor worst = at::tensor({double(h.params), double(h.peak_params), double(h.grads), double(h.state),
                                 double(usage.ru_maxrss) * 1024.0, vm_peak_bytes()},
                                at::kDouble);
  g->all_reduce(worst, ddp::op(ReduceOp::MAX));
  const double* w = worst.data_ptr<double>();
  if (g->rank() == 0) {
    print_machine_lines();
    std::printf(
        "ddp-bench memory: %s, MLP %lld-%lldx%lld-%lld (%.2fM parameters, float32), Adam, %d ranks over %s, "
        "%d steps, last loss %.4f\n",
        o.mode.c_str(), (long long)o.dim_in, (long long)o.layers - 1, (long long)o.width, (long long)o.classes,
        total_params / 1e6, g->size(), g->backend().c_str(), o.steps, loss);
    std::printf(
        "  per rank (max over ranks), MB: parameters %.2f (peak %.2f) | gradients %.2f | optimizer state %.2f"
        " | peak RSS %.1f | peak virtual %.1f\n",
        w[0] / 1e6, w[1] / 1e6, w[2] / 1e6, w[3] / 1e6, w[4] / 1e6, w[5] / 1e6);
    if (!o.json.empty())
      write_json(o.json, {{"tool", "ddp-bench memory"},
                          {"cpu", train::describe(train::cpu_info())},
                          {"mode", o.mode},
                          {"world", g->size()},
                          {"backend", g->backend()},
                          {"params", total_params},
                          {"parameter_bytes", w[0]},
                          {"peak_parameter_bytes", w[1]},
                          {"gradient_bytes", w[2]},
                          {"optimizer_state_bytes", w[3]},
                          {"peak_rss_bytes", w[4]},
                          {"peak_vm_bytes", w[5]},
                          {"loss", loss}});
  }
  destroy_process_group();
  return 0;
}

}  // namespace

void add_memory_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<Options>();
  auto* sub = app.add_subcommand("memory", "memory per rank of Adam training under DDP and ZeRO-1/2/3");
  sub->add_option("--mode", o->mode,
                  "ddp | zero1 (ZeroRedundancyOptimizer) | zero2 (FSDP ShardGradOp) | zero3 (FSDP FullShard)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3"}))
      ->capture_default_str();
  sub->add_option("--backend", o->backend, "gloo | mpi | auto")->capture_default_str();
  sub->add_option("--width", o->width, "hidden width of the MLP")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--layers", o->layers, "Linear layers")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--dim-in", o->dim_in, "input features")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--steps", o->steps, "training steps")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--batch", o->batch, "samples per rank")->check(CLI::PositiveNumber)->capture_default_str();
  sub->add_option("--json", o->json, "also write the result to this JSON file");
  sub->callback([o, &run] { run = [o] { return run_memory(*o); }; });
}

}  // namespace ddp::bench
