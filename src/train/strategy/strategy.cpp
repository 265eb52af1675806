// The strategies' registry.
#include "strategy.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "ddp/errors.h"

namespace ddp::train::detail {
namespace {

struct Entry {
  std::string summary;
  StrategyFactory make;
};

std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> all;
  return all;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

bool register_strategy(const std::string& name, const std::string& summary, StrategyFactory make) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!registry().emplace(name, Entry{summary, std::move(make)}).second)
    throw InvalidArgument("register_strategy: '" + name + "' is registered already");
  return true;
}

std::vector<std::pair<std::string, std::string>> strategies() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, e] : registry()) out.emplace_back(name, e.summary);
  return out;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, StrategyParts parts) {
  StrategyFactory make;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) make = it->second.make;
  }
  if (!make) {
    std::string valid;
    for (const auto& [n, summary] : strategies()) valid += (valid.empty() ? "" : ", ") + n;
    throw InvalidArgument("unknown strategy '" + name + "'; valid: " + valid);
  }
  return make(std::move(parts));
}

}  // namespace ddp::train::detail
