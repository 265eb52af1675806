// A plain MLP: n_layers bias-free linear layers
// dim_in -> dim_hidden -> ... -> n_classes, tanh between them, Kaiming-uniform
// initialisation. forward returns logits.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "ddp/train/models/sequential_net.h"

namespace ddp::models {

struct MLPOptions {
  int64_t n_layers = 4;
  int64_t dim_in = 1024;
  int64_t dim_hidden = 256;
  int64_t n_classes = 32;
};

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const MLPOptions& options = {});
  at::Tensor forward(const at::Tensor& x);
  const MLPOptions& options() const { return options_; }

 private:
  MLPOptions options_;
  torch::nn::ModuleList layers_;
};
TORCH_MODULE(MLP);

// The same network as a SequentialNet (Linear children 0, 2, 4, ...; Tanh between), which FSDP can shard;
// the same initial weights as MLP's for the same seed.
SequentialNet mlp_sequential(const MLPOptions& options = {});

}  // namespace ddp::models
