// ddp's fully_shard on the problem of fully_shard_interop.py (three residual blocks, each a unit, and the
// root; SGD with momentum, 6 steps); each rank writes its losses and its rows of every parameter in
// torch.save's format for the script to compare with PyTorch's FSDP2 shard by shard.
// Usage: fully_shard_interop OUT [bf16] (writes OUT.<rank>.pt; bf16: units in bfloat16, gradients reduced in float32)
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <string>

#include "ddp/ddp.h"
#include "ddp/train/checkpoint.h"

namespace {

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  BlockImpl() {
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({10})));
    fc1 = register_module("fc1", torch::nn::Linear(10, 7));
    fc2 = register_module("fc2", torch::nn::Linear(7, 10));
  }
  at::Tensor forward(const at::Tensor& x) { return x + fc2(at::tanh(fc1(ln(x)))); }
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  torch::nn::Linear emb{nullptr}, head{nullptr};
  std::vector<ddp::Sharded<Block>> blocks;  // PyTorch's fully_shard(block) for each
  NetImpl() {
    emb = register_module("emb", torch::nn::Linear(6, 10));
    auto list = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) {
      ddp::Sharded<Block> b;
      list->push_back(b);
      blocks.push_back(b);
    }
    head = register_module("head", torch::nn::Linear(10, 4));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = emb(x);
    for (auto& b : blocks) h = b(h);
    return head(h);
  }
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "bf16")) {
    std::fprintf(stderr, "usage: fully_shard_interop OUT [bf16]\n");
    return 2;
  }
  auto g = ddp::init_process_group();
  Net net;
  {
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : net->parameters()) {
      p.copy_((at::sin(at::arange(p.numel(), at::kFloat) * 0.37 + k) * 0.3).reshape(p.sizes()));
      ++k;
    }
  }
  ddp::FullyShardOptions options;
  if (argc == 3) {
    options.mp_policy.param_dtype = at::kBFloat16;
    options.mp_policy.reduce_dtype = at::kFloat;
  }
  ddp::FullyShard<Net> model(net, options);
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<at::Tensor> losses;
  for (int step = 0; step < 6; ++step) {
    at::Tensor x = at::cos(at::arange(5 * 6, at::kFloat) * 0.13 + step * 5 + g->rank() * 3).reshape({5, 6});
    at::Tensor y = (at::arange(5, at::kLong) + step + g->rank()).remainder(4);
    opt.zero_grad();
    at::Tensor loss = torch::nn::functional::cross_entropy(model(x).to(at::kFloat), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.detach());
  }
  c10::impl::GenericDict shards(c10::StringType::get(), c10::AnyType::get());
  for (const auto& p : model.named_parameters()) shards.insert(p.key(), p.value().detach());
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("losses", at::stack(losses));
  out.insert("shards", shards);
  ddp::train::save_atomic(out, std::string(argv[1]) + "." + std::to_string(g->rank()) + ".pt");
  ddp::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fully_shard_interop: %s\n", e.what());
  return 1;
}
