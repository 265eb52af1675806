// Unset settings filled: with a recipe's or a task's own default (fill), then with the defaults that no recipe
// or task needs to choose (fill_general_defaults), for ddp-train's recipes (recipes.cpp) and a Trainer's own
// Task (trainer_setup.cpp) alike.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "ddp/train/config.h"

namespace ddp::train::detail {

// A default for a setting the user left unset (an empty optional or string).
template <typename T>
void fill(std::optional<T>& field, T value) {
  if (!field) field = value;
}
inline void fill(std::string& field, const std::string& value) {
  if (field.empty()) field = value;
}

// After the recipe's or the task's defaults: what neither chose.
inline void fill_general_defaults(TrainConfig& cfg) {
  if (cfg.out_dir.empty()) cfg.out_dir = "runs/" + cfg.recipe;
  fill(cfg.optimizer, "sgd");
  fill(cfg.betas, std::make_pair(0.9, 0.999));
  fill(cfg.clip_grad, 0.0);
  fill<int64_t>(cfg.eval_every, 0);  // after each epoch only
}

}  // namespace ddp::train::detail
