// An exponential moving average of a model's weights: a second model of the
// same architecture whose floating-point parameters and buffers follow ema = rho * ema + (1 - rho) * model; integer
// buffers (BatchNorm's num_batches_tracked) are copied.
//
//   ddp::train::ModelEma ema(ResNet9(...).ptr(), 0.99);   // same architecture as net
//   ema.copy_from(*net);                                   // start equal
//   ... every k steps: ema.update(*net);  evaluate ema.module()
#pragma once
#include <torch/nn/module.h>

#include <memory>

namespace ddp::train {

class ModelEma {
 public:
  // `shadow`: a freshly built model of the same architecture (its values are overwritten by copy_from).
  ModelEma(std::shared_ptr<torch::nn::Module> shadow, double rho);

  void copy_from(const torch::nn::Module& model);
  void update(const torch::nn::Module& model);
  void update(const torch::nn::Module& model, double rho);  // this update's rho instead of rho()
  void copy_to(torch::nn::Module& model) const;             // the model takes the average (lookahead)
  torch::nn::Module& module() { return *shadow_; }
  std::shared_ptr<torch::nn::Module> ptr() const { return shadow_; }
  double rho() const { return rho_; }

 private:
  std::shared_ptr<torch::nn::Module> shadow_;
  double rho_;
};

}  // namespace ddp::train
