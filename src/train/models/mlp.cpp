#include "ddp/train/models/mlp.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include <stdexcept>

namespace ddp::models {

MLPImpl::MLPImpl(const MLPOptions& options) : options_(options) {
  if (options.n_layers < 1 || options.dim_in < 1 || options.dim_hidden < 1 || options.n_classes < 1)
    throw std::invalid_argument("MLP: n_layers, dim_in, dim_hidden and n_classes must be positive");
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options.n_layers; ++i) {
    int64_t in = i == 0 ? options.dim_in : options.dim_hidden;
    int64_t out = i + 1 == options.n_layers ? options.n_classes : options.dim_hidden;
    torch::nn::Linear layer(torch::nn::LinearOptions(in, out).bias(false));
    torch::nn::init::kaiming_uniform_(layer->weight);
    layers_->push_back(layer);
  }
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
