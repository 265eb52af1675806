#include "config_agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"

namespace ddp::train {
namespace {

// key -> value from to_config_file's lines; unset ones ("# key = (...)") read as unset.
std::vector<std::pair<std::string, std::string>> settings(const std::string& file) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(file);
  for (std::string line; std::getline(in, line);) {
    bool unset = line.rfind("# ", 0) == 0;
    if (unset) line = line.substr(2);
    auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq), value = unset ? "unset (the recipe's default)" : line.substr(eq + 3);
    if (key == "data-dir" || key == "progress") continue;
    out.emplace_back(key, value);
  }
  return out;
}

std::string compared_text(const TrainConfig& cfg) {
  std::string text;
  for (const auto& [k, v] : settings(to_config_file(cfg))) text += k + " = " + v + "\n";
  return text;
}

}  // namespace

void check_config_agreement(const TrainConfig& cfg, ProcessGroup& group) {
  const int world = group.size();
  if (world <= 1) return;
  const std::string mine = compared_text(cfg);
  at::Tensor hash = at::full({1}, static_cast<int64_t>(std::hash<std::string>{}(mine)), at::kLong);
  std::vector<at::Tensor> hashes;
  for (int r = 0; r < world; ++r) hashes.push_back(at::empty({1}, at::kLong));
  group.all_gather(hashes, hash);
  bool same = true;
  for (int r = 1; r < world; ++r) same = same && hashes[r].item<int64_t>() == hashes[0].item<int64_t>();
  if (same) return;

  std::vector<std::string> texts = all_gather_bytes(mine, group.shared_from_this());
  std::vector<std::map<std::string, std::string>> views;
  for (const auto& t : texts) {
    std::map<std::string, std::string> m;
    for (auto& kv : settings(t)) m.insert(kv);
    views.push_back(std::move(m));
  }
  std::ostringstream what;
  int differences = 0;
  for (const auto& [key, value0] : settings(texts[0])) {
    // Ranks grouped by value, in rank order: "32 on rank 1", "16 on ranks 2, 3".
    std::vector<std::pair<std::string, std::vector<int>>> others;
    for (int r = 1; r < world; ++r) {
      auto it = views[r].find(key);
      std::string v = it == views[r].end() ? "missing" : it->second;
      if (v == value0) continue;
      auto g = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == v; });
      if (g == others.end()) others.push_back({v, {r}});
      else g->second.push_back(r);
    }
    if (others.empty()) continue;
    what << (differences++ ? "; " : "") << "--" << key << " is " << value0 << " on rank 0 but ";
    for (size_t i = 0; i < others.size(); ++i) {
      what << (i ? " and " : "") << others[i].first << " on rank" << (others[i].second.size() > 1 ? "s " : " ");
      for (size_t k = 0; k < others[i].second.size(); ++k) what << (k ? ", " : "") << others[i].second[k];
    }
  }
  throw InvalidArgument("ddp-train: ranks disagree on the configuration: " + what.str() +
                        " (every rank must be started with the same flags and --config file)");
}

}  // namespace ddp::train
