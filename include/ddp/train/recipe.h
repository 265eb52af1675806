// A recipe: everything the trainer needs for one job (model, this rank's data,
// optimizer groups, schedule, augmentation, loss, weight averaging). Recipes
// fill the settings the user left unset (TrainConfig) with their defaults.
//
//   TrainConfig cfg = parse_args(argc, argv);
//   Recipe r = make_recipe(cfg, *group);   // cfg now fully resolved
#pragma once
#include <ATen/core/Generator.h>
#include <torch/nn/modules/container/any.h>

#include <functional>
#include <string>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"
#include "ddp/train/evaluate.h"
#include "ddp/train/schedule.h"

namespace ddp::train {

struct ParamGroup {
  std::string name;                // "weights", "biases"
  std::vector<at::Tensor> params;  // trainable only
  double lr_scale = 1;             // this group's lr = base lr * lr_scale
  double weight_decay = 0;
  int64_t train_epochs = 0;        // > 0: trained for the first N epochs only (lr 0 after); 0: always
};


struct Recipe {
  std::string name;
  torch::nn::AnyModule model;
  // A fresh model of the same architecture for the weight average (EMA); empty: no EMA.
  std::function<torch::nn::AnyModule()> make_shadow;
  double ema_rho = 0;  // per update; updates every cfg.ema_every steps
  // Lookahead (airbench): the average's rho at step/total_steps instead of ema_rho, and after each update the
  // model takes the averaged weights (and the average is what it evaluates and ends with).
  std::function<double(int64_t step, int64_t total)> lookahead_rho;
  Tta eval_tta = Tta::kNone;   // the evaluation after each epoch
  Tta final_tta = Tta::kNone;  // the evaluation after the last epoch (at least eval_tta's views)
  bool channels_last = false;  // batches in NHWC, oneDNN's native layout: convolutions skip a reorder (weights stay NCHW)

  at::Tensor train_x, train_y;  // this rank's training samples: the whole set, or its shard
  bool train_sharded = false;   // shards: shuffle locally; else: DistributedSampler over train_x
  int64_t train_total = 0;      // training samples over all ranks
  at::Tensor test_x, test_y;    // this rank's exact share of the test set
  int64_t test_total = 0;
  // Samples decoded per batch instead of held in train_x/test_x (imagefolder-*): when train_fetch is
  // set, the trainer's DistributedSampler runs over train_total samples and the loader's workers fetch
  // only this rank's; evaluation fetches this rank's exact share, test_indices.
  data::FetchBatch train_fetch, test_fetch;
  std::vector<int64_t> test_indices;

  // Training batches' augmentation, given the epoch; may be empty.
  std::function<at::Tensor(const at::Tensor& batch, at::Generator& gen, int64_t epoch)> augment;
  std::vector<ParamGroup> groups;
  bool nesterov = false;
  LrSchedule schedule = LrSchedule::constant();
};

// Fills cfg's unset fields with the recipe's defaults for a world of `world_size`
// ranks (out_dir included); touches no data.
void fill_recipe_defaults(TrainConfig& cfg, int world_size);

// Resolves cfg's unset fields with the recipe's defaults and builds the recipe
// for this rank. Loads (or, for shards, prepares) the data.
Recipe make_recipe(TrainConfig& cfg, ProcessGroup& group);

}  // namespace ddp::train
