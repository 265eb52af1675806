#include "rank_env.h"

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

int world_size(const Options& options) {
  return options.world_size > 0 ? options.world_size : options.nnodes * options.nproc_per_node;
}

int first_rank(const Options& options) {
  return options.first_rank >= 0 ? options.first_rank : options.node_rank * options.nproc_per_node;
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

std::vector<std::pair<std::string, std::string>> node_env_vars(const Options& options, int master_port,
                                                               const std::vector<std::string>& base, int cpus) {
  const int nproc = options.nproc_per_node;
  std::vector<std::pair<std::string, std::string>> vars = {
      {le::kWorldSize.name, std::to_string(world_size(options))}, {le::kLocalWorldSize.name, std::to_string(nproc)},
      {le::kGroupRank.name, std::to_string(options.node_rank)},   {le::kMasterAddr.name, options.master_addr},
      {le::kMasterPort.name, std::to_string(master_port)},
  };
  std::string omp;
  if (!find_env(base, le::kOmpNumThreads.name, &omp)) omp = std::to_string(default_omp_threads(cpus, nproc));
  vars.emplace_back(le::kOmpNumThreads.name, omp);
  if (options.backend != Backend::Auto) vars.emplace_back(le::kBackend.name, backend_name(options.backend));
  if (options.backend_on_gpu != Backend::Auto)
    vars.emplace_back(le::kBackendOnGpu.name, backend_name(options.backend_on_gpu));
  if (!options.backend_reason.empty()) vars.emplace_back(le::kBackendReason.name, options.backend_reason);
  vars.emplace_back(le::kLauncher.name, "ddprun");
  vars.emplace_back(le::kRunId.name, options.rdzv_id.empty()
                                         ? "none-" + options.master_addr + ":" + std::to_string(master_port)
                                         : options.rdzv_id);
  vars.emplace_back(le::kHeartbeatTimeout.name, le::format_seconds(options.heartbeat_timeout_s));
  if (!options.timeout.empty()) vars.emplace_back(le::kTimeout.name, options.timeout);
  if (!options.rdzv_timeout.empty()) vars.emplace_back(le::kRdzvTimeout.name, options.rdzv_timeout);
  return vars;
}

std::vector<std::pair<std::string, std::string>> rank_env_vars(const Options& options, int master_port,
                                                               const std::vector<std::string>& base, int cpus,
                                                               int local_rank) {
  auto vars = node_env_vars(options, master_port, base, cpus);
  vars.insert(vars.begin(), {{le::kRank.name, std::to_string(first_rank(options) + local_rank)},
                             {le::kLocalRank.name, std::to_string(local_rank)}});
  return vars;
}

std::vector<std::pair<std::string, std::string>> elastic_env_vars(const Options& options, int restart_count) {
  return {{le::kRestartCount.name, std::to_string(restart_count)},
          {le::kMaxRestarts.name, std::to_string(options.max_restarts)},
          {le::kRoleName.name, options.role},
          {le::kRoleWorldSize.name, std::to_string(world_size(options))},
          {le::kGroupWorldSize.name, std::to_string(options.nnodes)}};
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
