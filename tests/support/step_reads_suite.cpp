// On a GPU a read of a tensor's value or a copy to the host waits for the device; DDP's step (forward, backward
// with its reductions and hooks, the optimizer) makes none once its buckets are built and agreed (the first two
// steps). Counted by support/host_reads.h over steps 3-5, on every backend of the suites (the model on the group's
// device: a GPU over nccl), the nccl stand-in included: the built-in reduction, one bucket per parameter, the fp16,
// bf16 and PowerSGD hooks, find_unused_parameters (one read per backward on a GPU, as PyTorch's), SyncBatchNorm,
// and ZeRO's step.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <mutex>

#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/parallel/zero.h"
#include "support/ddp_suite.h"
#include "support/host_reads.h"

namespace ddp::testing {
namespace {

// Two layers, and a third that is used only where `use_third` (find_unused_parameters' case).
struct Mlp : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  bool with_norm, use_third = true;
  explicit Mlp(bool norm) : with_norm(norm) {
    a = register_module("a", torch::nn::Linear(3, 8));
    if (with_norm) register_module("norm", torch::nn::BatchNorm1d(8));  // called through the registry: converted
    b = register_module("b", torch::nn::Linear(8, 4));
    c = register_module("c", torch::nn::Linear(4, 4));
  }
  at::Tensor forward(at::Tensor x) {
    x = a(x);
    if (with_norm) x = batch_norm_child(*this, "norm", x);
    x = b(torch::tanh(x));
    return use_third ? c(x) : x;
  }
};

std::shared_ptr<Mlp> built(bool with_norm) {
  static std::mutex mu;  // rank threads share the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(4);
  return std::make_shared<Mlp>(with_norm);
}

struct Setup {
  std::string name;
  std::string hook;  // "" for none: the built-in reduction
  bool tiny_buckets = false;
  bool find_unused = false;
  bool sync_bn = false;
  bool zero = false;
};

// Host reads over steps 3-5 of `s` on this rank.
std::string reads_of_steps(ProcessGroup& g, const Setup& s) {
  auto net = built(s.sync_bn);
  if (s.sync_bn) convert_sync_batchnorm(net, handle(g));
  const at::Device dev = g.device();  // the rank's GPU over nccl: the reads a GPU's step would wait on
  net->to(dev);
  DDPOptions o;
  o.group = handle(g);
  o.find_unused_parameters = s.find_unused;
  if (s.tiny_buckets) o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-6;  // one bucket per parameter
  DistributedDataParallel model(net, o);
  if (!s.hook.empty()) model.register_comm_hook(make_comm_hook(s.hook));
  std::unique_ptr<torch::optim::Optimizer> sgd;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  if (s.zero)
    zero = std::make_unique<ZeroRedundancyOptimizer>(
        net->parameters(),
        [](std::vector<torch::optim::OptimizerParamGroup> groups) {
          return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(0.01));
        },
        ZeroOptions{handle(g)});
  else
    sgd = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(70 + g.rank());
  std::optional<HostReads> counter;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) counter.emplace();
    net->use_third = !s.find_unused || (step + g.rank()) % 2 == 0;  // used on some ranks only, changing
    const at::Tensor x = to_device(at::randn({6, 3}, gen), dev), y = to_device(at::randn({6, 4}, gen), dev);
    if (zero)
      zero->zero_grad();
    else
      sgd->zero_grad();
    torch::mse_loss(model(x), y).backward();
    if (zero)
      zero->step();
    else
      sgd->step();
  }
  return counter->count() ? counter->describe() : "";
}

void steps_read_nothing(ProcessGroup& g) {
  const std::vector<Setup> setups = {
      {"the built-in all_reduce"},
      {"one bucket per parameter", "", true},
      {"the fp16 hook", "fp16", true},
      {"the bf16 hook", "bf16"},
      {"PowerSGD", "powersgd:rank=1,start=2", true},
      {"find_unused_parameters", "", false, true},
      {"SyncBatchNorm", "", false, false, true},
      {"ZeRO-1 (AdamW)", "", false, false, false, true},
  };
  for (const Setup& s : setups) {
    // find_unused_parameters reads which parameters some rank used once per backward where that read waits (a
    // GPU's counts, copied back: PyTorch's local_used_map does the same); on the CPU it is the counts themselves.
    const std::string expected = s.find_unused && host_reads_wait(g.device()) ? "aten::to to cpu x3" : "";
    EXPECT_EQ(reads_of_steps(g, s), expected) << tag(g, s.name + ": host reads in steps 3-5");
  }
}

}  // namespace

const std::vector<SuiteCase>& step_reads_suite() {
  static const std::vector<SuiteCase> cases = {{"DdpStepsReadNothingOnTheHost", steps_read_nothing}};
  return cases;
}

}  // namespace ddp::testing
