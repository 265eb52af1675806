// The environment given to each rank.
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "launch/attempt.h"

namespace ddprun {

// Number of online CPU cores (at least 1).
int online_cpu_count();

// OMP_NUM_THREADS for P processes on a node with `cpus` cores: max(1, cpus / P).
int default_omp_threads(int cpus, int nproc_per_node);

// Variables shared by all ranks of this node: WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS (unless `base` has it),
// DDP_BACKEND (unless the backend is auto), DDP_LAUNCHER=ddprun and TORCHELASTIC_RUN_ID
// (options.rdzv_id, else "none-MASTER_ADDR:PORT"), for the attempt's backend and placement.
std::vector<std::pair<std::string, std::string>> node_env_vars(const Options& options, const Attempt& attempt,
                                                               const std::vector<std::string>& base, int cpus);

// Adds RANK = the placement's first rank + local_rank and LOCAL_RANK.
std::vector<std::pair<std::string, std::string>> rank_env_vars(const Options& options, const Attempt& attempt,
                                                               const std::vector<std::string>& base, int cpus,
                                                               int local_rank);

// torchrun's agent variables for the attempt:
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS (TORCHELASTIC_RUN_ID is in node_env_vars),
// ROLE_NAME, ROLE_WORLD_SIZE and GROUP_WORLD_SIZE (the number of nodes).
// One role per job, so ROLE_RANK (added per rank) equals RANK.
std::vector<std::pair<std::string, std::string>> elastic_env_vars(const Options& options, const Attempt& attempt);

// "KEY=VALUE" entries of `base` with the given variables set (replacing any
// existing values) and the variables named in `remove` dropped.
std::vector<std::string> merge_env(const std::vector<std::string>& base,
                                   const std::vector<std::pair<std::string, std::string>>& set,
                                   const std::vector<std::string>& remove = {});

// The current process environment as "KEY=VALUE" strings.
std::vector<std::string> current_environment();

// Whether `key` is set in a "KEY=VALUE" list; stores its value in *value if non-null.
bool find_env(const std::vector<std::string>& env, const std::string& key, std::string* value);

}  // namespace ddprun
