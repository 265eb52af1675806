// What the Trainer trains: a model, its data, and how to optimise and judge it.
// The built-in recipes (recipe.h) build one; so does a user with their own model:
//
//   ddp::train::Task task;
//   task.model = torch::nn::AnyModule(MyNet());
//   task.train = ddp::train::TensorData{x, y};     // every rank's copy; the DistributedSampler picks
//   task.test = ddp::train::TensorData{tx, ty};    // the whole test set; each rank evaluates its share
//   task.make_optimizer = [](torch::nn::Module& m) {
//     return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
//   };
//   trainer.fit(std::move(task));
#pragma once
#include <ATen/core/Generator.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/train/evaluate.h"
#include "ddp/train/task_data.h"

namespace ddp::train {

// Parameters that share an lr scale and weight decay, for the built-in optimizer (TrainConfig::optimizer).
struct ParamGroup {
  std::string name;                // "weights", "biases"
  std::vector<at::Tensor> params;  // trainable only
  double lr_scale = 1;             // this group's lr = base lr * lr_scale
  double weight_decay = 0;
  int64_t train_epochs = 0;  // > 0: trained for the first N epochs only (lr 0 after); 0: always
};

// A weight average of the model (ema.h), updated every TrainConfig::ema_every steps and evaluated in its place.
struct WeightAverage {
  std::function<torch::nn::AnyModule()> make_shadow;  // a fresh model of the same architecture; empty: none
  double rho = 0;                                     // per update
  // Lookahead (Zhang et al. 2019, as airbench uses it): each update's rho at (step, total steps) instead of rho,
  // and after each update the model takes the averaged weights, so the model is the average evaluated and kept.
  std::function<double(int64_t step, int64_t total)> lookahead;
};

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(torch::nn::Module& model)>;

struct Task {
  std::string name;
  torch::nn::AnyModule model;  // forward(x) -> output (logits [B, C] for classification)

  // The loss of a batch, averaged over its samples; empty: cross-entropy with TrainConfig::label_smoothing.
  LossFn loss;
  // Evaluation metrics beyond loss, acc1 and acc5 (evaluate.h): logged as "<name>/val".
  std::vector<Metric> metrics;
  // The optimizer over the model (after DDP's broadcast of rank 0's weights). The schedule multiplies each param
  // group's learning rate as created here. Empty: TrainConfig::optimizer over `groups` (all parameters if none).
  OptimizerFactory make_optimizer;
  std::vector<ParamGroup> groups;
  bool nesterov = false;  // the built-in SGD's

  // The training samples (every rank's set, or this rank's shard) and the evaluation samples (the whole set,
  // or this rank's exact share): tensors or batches fetched (task_data.h). Both are required.
  DataSource train, test;

  // Training batches' augmentation, given the epoch; may be empty.
  std::function<at::Tensor(const at::Tensor& batch, at::Generator& gen, int64_t epoch)> augment;
  // Every model input passes through it, training batches on the loader's threads (after augment) and
  // evaluation batches before they move to the device; e.g. channels-last batches. Empty: as they are.
  std::function<at::Tensor(const at::Tensor& batch)> prepare_input;
  // An evaluation batch's logits from the model's forward (test-time augmentation: with_tta, evaluate.h);
  // `last` for the evaluation after the final epoch. Empty: forward(x).
  EvalForward eval_forward;
  // Weight averaging (EMA or lookahead); none without make_shadow.
  WeightAverage average;
};

}  // namespace ddp::train
