// The built-in recipes: each builds a Task (model, this rank's data, optimizer
// groups, augmentation, weight averaging) for the Trainer, and fills the
// settings the user left unset (TrainConfig) with its defaults.
//
//   TrainConfig cfg = parse_args(argc, argv);
//   Recipe r = make_recipe(cfg, *group);   // cfg now fully resolved
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"
#include "ddp/train/task.h"

namespace ddp::train {

// A recipe is a Task (task.h) built from the settings; the Trainer trains it like any other.
using Recipe = Task;

// A recipe as ddp-train knows it: its name, one line for --help, its defaults
// for the settings left unset (for a world of `world_size` ranks; touches no
// data), and its builder for this rank (loads or prepares the data).
struct RecipeInfo {
  std::string name;
  std::string summary;
  std::function<void(TrainConfig&, int world_size)> defaults;
  std::function<Recipe(TrainConfig&, ProcessGroup&)> build;
};

// Adds a recipe to the registry that ddp-train, --help and the tests list. A
// recipe's file registers itself, once, at load time:
//   static const bool registered = ddp::train::register_recipe({"my-recipe", "...", my_defaults, my_build});
// InvalidArgument on an empty or taken name, or a missing function.
bool register_recipe(RecipeInfo info);
// The registered recipes, sorted by name.
const std::vector<RecipeInfo>& registered_recipes();
// nullptr when no recipe has that name.
const RecipeInfo* find_recipe(const std::string& name);

// Fills cfg's unset fields with the recipe's defaults for a world of `world_size`
// ranks (out_dir included); touches no data.
void fill_recipe_defaults(TrainConfig& cfg, int world_size);

// Resolves cfg's unset fields with the recipe's defaults and builds the recipe
// for this rank. Loads (or, for shards, prepares) the data.
Recipe make_recipe(TrainConfig& cfg, ProcessGroup& group);

}  // namespace ddp::train
