// The Trainer's weight average (Task::average): the EMA's model, its updates after the steps, lookahead's
// copy back into the model, and which model is evaluated and checkpointed.
#pragma once
#include <torch/nn/modules/container/any.h>

#include <memory>

#include "ddp/train/ema.h"
#include "ddp/train/task.h"

namespace ddp::train::detail {

class Averager {
 public:
  // Whether a Task with `spec` keeps an average when updated every `every` steps (0: never).
  static bool wanted(const WeightAverage& spec, int64_t every) { return spec.make_shadow && every > 0; }

  Averager() = default;
  // The average on `device`, starting as `model`'s weights (rank 0's, after the strategy's broadcast).
  Averager(const WeightAverage& spec, int64_t every, torch::nn::Module& model, const at::Device& device);

  explicit operator bool() const { return bool(ema_); }
  // After optimizer step `step` (1-based) of `total`: an update each `every` steps; lookahead's model takes the
  // average after each, and ends as it.
  void after_step(torch::nn::Module& model, int64_t step, int64_t total);
  // What is evaluated: the average, unless it is none or lookahead's (the model holds it).
  torch::nn::AnyModule& evaluated(torch::nn::AnyModule& model);
  // The averaged model, for checkpoints; null when none.
  torch::nn::Module* average() { return ema_ ? &ema_->module() : nullptr; }

 private:
  WeightAverage spec_;
  int64_t every_ = 0;
  torch::nn::AnyModule shadow_;
  std::unique_ptr<ModelEma> ema_;
};

}  // namespace ddp::train::detail
