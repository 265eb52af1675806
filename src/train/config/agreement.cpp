#include "agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "settings.h"

namespace ddp::train {
namespace {

// The settings every rank must share, as (flag, value) pairs.
std::vector<std::pair<std::string, std::string>> agreed(const TrainConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& s : detail::settings())
    if (s.role & detail::kAgreed) out.emplace_back(detail::flag_of(s), detail::value_text(s, cfg));
  return out;
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

// As JSON: values may hold any character.
std::string as_text(const Pairs& settings) { return nlohmann::json(settings).dump(); }
Pairs from_text(const std::string& text) { return nlohmann::json::parse(text).get<Pairs>(); }

}  // namespace

void check_config_agreement(const TrainConfig& cfg, ProcessGroup& group) {
  const int world = group.size();
  if (world <= 1) return;
  const std::string mine = as_text(agreed(cfg));
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
    for (auto& kv : from_text(t)) m.insert(kv);
    views.push_back(std::move(m));
  }
  std::ostringstream what;
  int differences = 0;
  for (const auto& [key, value0] : from_text(texts[0])) {
    // Ranks grouped by value, in rank order: "32 on rank 1", "16 on ranks 2, 3".
    std::vector<std::pair<std::string, std::vector<int>>> others;
    for (int r = 1; r < world; ++r) {
      auto it = views[r].find(key);
      std::string v = it == views[r].end() ? "missing" : it->second;
      if (v == value0) continue;
      auto g = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == v; });
      if (g == others.end())
        others.push_back({v, {r}});
      else
        g->second.push_back(r);
    }
    if (others.empty()) continue;
    what << (differences++ ? "; " : "") << key << " is " << value0 << " on rank 0 but ";
    for (size_t i = 0; i < others.size(); ++i) {
      what << (i ? " and " : "") << others[i].first << " on rank" << (others[i].second.size() > 1 ? "s " : " ");
      for (size_t k = 0; k < others[i].second.size(); ++k) what << (k ? ", " : "") << others[i].second[k];
    }
  }
  throw InvalidArgument("ddp-train: ranks disagree on the configuration: " + what.str() +
                        " (every rank must be started with the same flags and --config file)");
}

}  // namespace ddp::train
