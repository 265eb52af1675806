// The recipes' registry: each recipe's file registers itself (register_recipe);
// ddp-train, its --help and the tests find them here.
#include <algorithm>
#include <mutex>

#include "common.h"
#include "ddp/errors.h"

namespace ddp::train {
namespace {

std::vector<RecipeInfo>& registry() {
  static std::vector<RecipeInfo> recipes;
  return recipes;
}

}  // namespace

bool register_recipe(RecipeInfo info) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (info.name.empty() || !info.defaults || !info.build)
    throw InvalidArgument("register_recipe: a recipe needs a name, a defaults function and a build function" +
                          (info.name.empty() ? std::string() : " ('" + info.name + "')"));
  auto& all = registry();
  auto at = std::lower_bound(all.begin(), all.end(), info.name,
                             [](const RecipeInfo& r, const std::string& name) { return r.name < name; });
  if (at != all.end() && at->name == info.name)
    throw InvalidArgument("register_recipe: a recipe named '" + info.name + "' is registered already");
  all.insert(at, std::move(info));
  return true;
}

const std::vector<RecipeInfo>& registered_recipes() { return registry(); }

const RecipeInfo* find_recipe(const std::string& name) {
  for (const auto& r : registry())
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& r : registry()) names.push_back(r.name);
  return names;
}

// The registered recipe named by cfg.recipe; InvalidArgument listing them otherwise.
static const RecipeInfo& recipe_of(const TrainConfig& cfg) {
  const RecipeInfo* r = find_recipe(cfg.recipe);
  if (!r) {
    std::string valid;
    for (const auto& n : recipe_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw InvalidArgument("ddp-train: unknown recipe '" + cfg.recipe + "'; valid: " + valid);
  }
  return *r;
}

void fill_recipe_defaults(TrainConfig& cfg, int world_size) {
  const RecipeInfo& recipe = recipe_of(cfg);
  if (!cfg.optimizer.empty() && cfg.optimizer != "sgd") detail::fill(cfg.lr, 1e-3);  // the recipes' rates are SGD's
  recipe.defaults(cfg, world_size);
  detail::fill_general_defaults(cfg);
}

Recipe make_recipe(TrainConfig& cfg, ProcessGroup& group) {
  fill_recipe_defaults(cfg, group.size());
  return recipe_of(cfg).build(cfg, group);
}

}  // namespace ddp::train
