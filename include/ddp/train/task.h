// What the Trainer trains: a model, its data, and how to optimise and judge it.
// The built-in recipes (recipe.h) build one; so does a user with their own model:
//
//   ddp::train::Task task;
//   task.model = torch::nn::AnyModule(MyNet());
//   task.train_x = x; task.train_y = y;            // every rank's copy; the DistributedSampler picks
//   task.test_x = tx; task.test_y = ty;            // the whole test set; each rank evaluates its share
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

#include "ddp/data/batch_loader.h"
#include "ddp/data/dataset_fetch.h"
#include "ddp/train/evaluate.h"

namespace ddp::train {

// Parameters that share an lr scale and weight decay, for the built-in optimizer (TrainConfig::optimizer).
struct ParamGroup {
  std::string name;                // "weights", "biases"
  std::vector<at::Tensor> params;  // trainable only
  double lr_scale = 1;             // this group's lr = base lr * lr_scale
  double weight_decay = 0;
  int64_t train_epochs = 0;  // > 0: trained for the first N epochs only (lr 0 after); 0: always
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

  // Training data, one of:
  //  - tensors: train_x [N, ...], train_y [N] on every rank (the DistributedSampler picks each rank's), or
  //    this rank's shard with train_sharded = true and train_total = samples over all ranks;
  //  - samples made per batch by the loader's workers (files, a LibTorch dataset: set_train_dataset):
  //    train_fetch over train_total samples, of which the DistributedSampler picks this rank's.
  at::Tensor train_x, train_y;
  bool train_sharded = false;
  int64_t train_total = 0;
  data::FetchBatch train_fetch;
  // Evaluation data, one of: test_x / test_y (the whole set on every rank; or this rank's exact share,
  // test_sharded = true, with test_total); or test_fetch over test_total samples (this rank fetches
  // test_indices, or its exact share when test_indices is empty). One of them is required (for now).
  at::Tensor test_x, test_y;
  bool test_sharded = false;
  int64_t test_total = 0;
  data::FetchBatch test_fetch;
  std::vector<int64_t> test_indices;

  // Training batches' augmentation, given the epoch; may be empty.
  std::function<at::Tensor(const at::Tensor& batch, at::Generator& gen, int64_t epoch)> augment;

  // Weight averaging: a fresh model of the same architecture for the average (EMA); empty: none.
  std::function<torch::nn::AnyModule()> make_shadow;
  double ema_rho = 0;  // per update; updates every TrainConfig::ema_every steps
  // Lookahead (airbench): the average's rho at step/total_steps instead of ema_rho, and after each update the
  // model takes the averaged weights (and the average is what it evaluates and ends with).
  std::function<double(int64_t step, int64_t total)> lookahead_rho;
  Tta eval_tta = Tta::kNone;   // the evaluation after each epoch
  Tta final_tta = Tta::kNone;  // the evaluation after the last epoch (at least eval_tta's views)
  bool channels_last = false;  // batches in NHWC, oneDNN's native layout: convolutions skip a reorder

  // A LibTorch dataset (get(i) -> Example{data, target}, size()) as the training or evaluation samples.
  template <typename Dataset>
  void set_train_dataset(Dataset dataset) {
    std::tie(train_fetch, train_total) = data::fetch_dataset(std::move(dataset));
  }
  template <typename Dataset>
  void set_test_dataset(Dataset dataset) {
    std::tie(test_fetch, test_total) = data::fetch_dataset(std::move(dataset));
  }
};

}  // namespace ddp::train
