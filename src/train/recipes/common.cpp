#include "common.h"

#include <sys/stat.h>

#include <cstdlib>

#include "ddp/data/shards.h"
#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"
#include "ddp/train/evaluate.h"

namespace ddp::train::detail {

void set_train_data(Recipe& r, const TrainConfig& cfg, ProcessGroup& group, const std::string& name,
                    const std::string& source_id, const Source& load,
                    const std::function<at::Tensor(const at::Tensor&)>& finish) {
  if (cfg.data_mode == "shards") {
    data::ShardSpec spec;
    spec.dir = cfg.out_dir + "/shards";
    spec.name = name;
    spec.num_shards = group.size();
    spec.seed = cfg.seed;
    spec.source_id = source_id + ";limit=" + std::to_string(cfg.limit_train);
    data::Shard shard = data::prepare_shards(group, spec, [&] { return limit(load(), cfg.limit_train); });
    r.train = TensorData::shard(finish(shard.x), shard.y, shard.y.size(0) * group.size());
  } else {
    auto [x, y] = limit(load(), cfg.limit_train);
    r.train = TensorData{finish(x), y};
  }
}

void set_test_data(Recipe& r, const TrainConfig& cfg, const ProcessGroup& group, const at::Tensor& x,
                   const at::Tensor& y) {
  auto [lx, ly] = limit({x, y}, cfg.limit_test);
  if (launch_env::choice(launch_env::kRecovery) == std::optional<std::string>("inplace")) {
    r.test = TensorData{lx, ly};  // in-place recovery: the Evaluator takes each world's share of the whole set
    return;
  }
  at::Tensor mine = exact_shard(ly.size(0), group);
  r.test = TensorData::shard(lx.index_select(0, mine), ly.index_select(0, mine), ly.size(0));
}

std::pair<at::Tensor, at::Tensor> limit(std::pair<at::Tensor, at::Tensor> xy, int64_t n) {
  if (n <= 0 || n >= xy.second.size(0)) return xy;
  return {xy.first.narrow(0, 0, n), xy.second.narrow(0, 0, n)};
}

std::vector<int64_t> evenly_spaced(int64_t limit, int64_t size) {
  const int64_t n = limit > 0 && limit < size ? limit : size;
  std::vector<int64_t> picked(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) picked[size_t(i)] = i * size / n;
  return picked;
}

ParamGroup all_parameters(torch::nn::Module& m, double weight_decay) {
  ParamGroup g;
  g.name = "all";
  for (auto& p : m.parameters())
    if (p.requires_grad()) g.params.push_back(p);
  g.weight_decay = weight_decay;
  return g;
}

std::string file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ":missing";
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
}

namespace {
// ~/.cache/ddp/<name>, or "" without a HOME.
std::string cache_dir(const std::string& name) {
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.cache/ddp/" + name : std::string();
}
bool is_dir(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

std::string default_data_dir(const std::string& name, const std::string& system_dir) {
  if (auto root = launch_env::text(launch_env::kDataDir)) return *root + "/" + name;
  const std::string cache = cache_dir(name);
  if (is_dir(cache)) return cache;
  if (is_dir(system_dir)) return system_dir;
  return cache.empty() ? "./" + name : cache;
}

void require_data_dir(const std::string& dir, const std::string& name, const std::string& how_to_get) {
  if (is_dir(dir)) return;
  throw InvalidArgument("ddp-train: the " + name + " data set is not at " + dir +
                        " (no such folder; ddp-train looks in " + "--data-dir DIR, else $DDP_DATA_DIR/" + name +
                        ", else ~/.cache/ddp/" + name + "). To get it: " + how_to_get);
}

}  // namespace ddp::train::detail
