#include "launch/rank_env.h"

#include <unistd.h>

#include <algorithm>

#include "ddp/dist/launch_env.h"

extern char** environ;

namespace ddprun {

namespace le = ddp::launch_env;

int online_cpu_count() {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? static_cast<int>(n) : 1;
}

int default_omp_threads(int cpus, int nproc_per_node) { return std::max(1, cpus / std::max(1, nproc_per_node)); }

namespace {

bool has_key(const std::string& entry, const std::string& key) {
  return entry.size() > key.size() && entry.compare(0, key.size(), key) == 0 && entry[key.size()] == '=';
}

}  // namespace

Placement static_placement(const Options& options, const std::string& master_addr, int master_port) {
  Placement p;
  p.node_rank = options.node_rank;
  p.nnodes = options.nnodes;
  p.world_size = options.nnodes * options.nproc_per_node;
  p.first_rank = options.node_rank * options.nproc_per_node;
  p.master_addr = master_addr;
  p.master_port = master_port;
  return p;
}

bool find_env(const std::vector<std::string>& env, const std::string& key, std::string* value) {
  for (const std::string& entry : env) {
    if (has_key(entry, key)) {
      if (value != nullptr) *value = entry.substr(key.size() + 1);
      return true;
    }
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> node_env_vars(const Options& options, const Attempt& attempt,
                                                               const std::vector<std::string>& base, int cpus) {
  const int nproc = options.nproc_per_node;
  const Placement& p = attempt.place;
  const LaunchBackend& b = attempt.backend;
  std::vector<std::pair<std::string, std::string>> vars = {
      {le::kWorldSize.name, std::to_string(p.world_size)},   {le::kLocalWorldSize.name, std::to_string(nproc)},
      {le::kGroupRank.name, std::to_string(p.node_rank)},    {le::kMasterAddr.name, p.master_addr},
      {le::kMasterPort.name, std::to_string(p.master_port)},
  };
  std::string omp;
  if (!find_env(base, le::kOmpNumThreads.name, &omp)) omp = std::to_string(default_omp_threads(cpus, nproc));
  vars.emplace_back(le::kOmpNumThreads.name, omp);
  if (b.backend != Backend::kAuto) vars.emplace_back(le::kBackend.name, backend_name(b.backend));
  if (b.on_gpu != Backend::kAuto) vars.emplace_back(le::kBackendOnGpu.name, backend_name(b.on_gpu));
  if (!b.reason.empty()) vars.emplace_back(le::kBackendReason.name, b.reason);
  vars.emplace_back(le::kLauncher.name, "ddprun");
  vars.emplace_back(le::kRunId.name, options.rdzv_id.empty()
                                         ? "none-" + p.master_addr + ":" + std::to_string(p.master_port)
                                         : options.rdzv_id);
  vars.emplace_back(le::kHeartbeatTimeout.name, le::format_seconds(options.heartbeat_timeout_s));
  if (options.recovery == Recovery::kInplace) vars.emplace_back(le::kRecovery.name, "inplace");
  if (options.timeout_s) vars.emplace_back(le::kTimeout.name, le::format_seconds(*options.timeout_s));
  if (options.rdzv_timeout_s) vars.emplace_back(le::kRdzvTimeout.name, le::format_seconds(*options.rdzv_timeout_s));
  return vars;
}

std::vector<std::pair<std::string, std::string>> rank_env_vars(const Options& options, const Attempt& attempt,
                                                               const std::vector<std::string>& base, int cpus,
                                                               int local_rank) {
  auto vars = node_env_vars(options, attempt, base, cpus);
  vars.insert(vars.begin(), {{le::kRank.name, std::to_string(attempt.place.first_rank + local_rank)},
                             {le::kLocalRank.name, std::to_string(local_rank)}});
  return vars;
}

std::vector<std::pair<std::string, std::string>> elastic_env_vars(const Options& options, const Attempt& attempt) {
  return {{le::kRestartCount.name, std::to_string(attempt.restart_count)},
          {le::kMaxRestarts.name, std::to_string(options.max_restarts)},
          {le::kRoleName.name, options.role},
          {le::kRoleWorldSize.name, std::to_string(attempt.place.world_size)},
          {le::kGroupWorldSize.name, std::to_string(attempt.place.nnodes)}};
}

std::vector<std::string> merge_env(const std::vector<std::string>& base,
                                   const std::vector<std::pair<std::string, std::string>>& set,
                                   const std::vector<std::string>& remove) {
  std::vector<std::string> out;
  out.reserve(base.size() + set.size());
  for (const std::string& entry : base) {
    bool drop = false;
    for (const auto& kv : set) drop = drop || has_key(entry, kv.first);
    for (const std::string& key : remove) drop = drop || has_key(entry, key);
    if (!drop) out.push_back(entry);
  }
  for (const auto& kv : set) out.push_back(kv.first + "=" + kv.second);
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace ddprun
