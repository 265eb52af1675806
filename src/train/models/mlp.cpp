#include "ddp/train/models/mlp.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <stdexcept>

namespace ddp::models {

namespace {

// Layer i of the MLP, initialised (the same draws from the generator, in the same order, for both forms).
torch::nn::Linear mlp_layer(const MLPOptions& options, int64_t i) {
  if (options.n_layers < 1 || options.dim_in < 1 || options.dim_hidden < 1 || options.n_classes < 1)
    throw std::invalid_argument("MLP: n_layers, dim_in, dim_hidden and n_classes must be positive");
  int64_t in = i == 0 ? options.dim_in : options.dim_hidden;
  int64_t out = i + 1 == options.n_layers ? options.n_classes : options.dim_hidden;
  torch::nn::Linear layer(torch::nn::LinearOptions(in, out).bias(false));
  torch::nn::init::kaiming_uniform_(layer->weight);
  return layer;
}

}  // namespace

MLPImpl::MLPImpl(const MLPOptions& options) : options_(options) {
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.n_layers; ++i) layers_->push_back(mlp_layer(options, i));
}

SequentialNet mlp_sequential(const MLPOptions& options) {
  SequentialNet net;
  for (int64_t i = 0; i < options.n_layers; ++i) {
    net->push_back(mlp_layer(options, i));
    if (i + 1 < options.n_layers) net->push_back(torch::nn::Tanh());
  }
  return net;
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  at::Tensor out = x;
  for (size_t i = 0; i < layers_->size(); ++i) {
    out = layers_[i]->as<torch::nn::Linear>()->forward(out);
    if (i + 1 < layers_->size()) out = at::tanh(out);
  }
  return out;
}

}  // namespace ddp::models
