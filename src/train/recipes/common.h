// Pieces the recipes share: this rank's training and test data, parameter groups.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "ddp/train/recipe.h"
#include "train/config/defaults.h"  // fill: a recipe's default for a setting left unset

namespace ddp::train::detail {

using Source = std::function<std::pair<at::Tensor, at::Tensor>()>;

// Sets r.train. shards: rank 0 writes per-rank shard files of
// `load()`'s samples under <out_dir>/shards once (again when source_id
// changes), each rank loads its own; sampler: every rank keeps the whole set.
// `finish` converts the stored samples (e.g. uint8 -> normalized float).
void set_train_data(Recipe& r, const TrainConfig& cfg, ProcessGroup& group, const std::string& name,
                    const std::string& source_id, const Source& load,
                    const std::function<at::Tensor(const at::Tensor&)>& finish);

// Sets r.test to this rank's exact share of (x, y).
void set_test_data(Recipe& r, const TrainConfig& cfg, const ProcessGroup& group, const at::Tensor& x,
                   const at::Tensor& y);

// The first `limit` samples (all when limit is 0).
std::pair<at::Tensor, at::Tensor> limit(std::pair<at::Tensor, at::Tensor> xy, int64_t limit);

// `limit` indices of 0..size-1, evenly spaced (i * size / limit); all when limit is 0 or at least size.
std::vector<int64_t> evenly_spaced(int64_t limit, int64_t size);

// One group of all trainable parameters.
ParamGroup all_parameters(torch::nn::Module& m, double weight_decay);
// A file's identity for shard freshness: path, size, modification time.
std::string file_id(const std::string& path);

// Where the data set `name` is when --data-dir is not given: $DDP_DATA_DIR/<name> when
// DDP_DATA_DIR is set; else ~/.cache/ddp/<name> when it exists; else `system_dir` (where a
// distribution's package puts it) when given and present; else ~/.cache/ddp/<name>.
std::string default_data_dir(const std::string& name, const std::string& system_dir = "");
// InvalidArgument unless `dir` is a folder, saying where the set was looked for and how to get it.
void require_data_dir(const std::string& dir, const std::string& name, const std::string& how_to_get);

}  // namespace ddp::train::detail
