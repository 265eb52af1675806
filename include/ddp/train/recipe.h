// The built-in recipes: each builds a Task (model, this rank's data, optimizer
// groups, augmentation, weight averaging) for the Trainer, and fills the
// settings the user left unset (TrainConfig) with its defaults.
//
//   TrainConfig cfg = parse_args(argc, argv);
//   Recipe r = make_recipe(cfg, *group);   // cfg now fully resolved
#pragma once
#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"
#include "ddp/train/task.h"

namespace ddp::train {

// A recipe is a Task (task.h) built from the settings; the Trainer trains it like any other.
using Recipe = Task;

// Fills cfg's unset fields with the recipe's defaults for a world of `world_size`
// ranks (out_dir included); touches no data.
void fill_recipe_defaults(TrainConfig& cfg, int world_size);

// Resolves cfg's unset fields with the recipe's defaults and builds the recipe
// for this rank. Loads (or, for shards, prepares) the data.
Recipe make_recipe(TrainConfig& cfg, ProcessGroup& group);

}  // namespace ddp::train
