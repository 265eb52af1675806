// Launching the ranks of this node directly (gloo/auto backends).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "launch/elastic.h"

namespace ddprun {

// One attempt: starts options.nproc_per_node copies of the program at
// exec_path, prints their output with "[rank N] " prefixes (and/or logs it,
// see rank_logs.h), supervises them and prints the failure summary.
AttemptOutcome run_local(const Options& options, const std::string& exec_path, const Attempt& attempt);

// What ddp::spawn (include/ddp/spawn.h) changes in a local launch.
struct LocalLaunchExtras {
  std::vector<std::string> argv;                         // the ranks' argv; empty: program + program args
  std::vector<std::pair<std::string, std::string>> env;  // set for every rank, replacing ddprun's values
  bool prefix_output = true;                             // "[rank N] " before each line
  std::string summary_prefix = "ddprun: ";               // before each line of the failure summary
  std::string final_line;  // when set: the summary ends with final_line + N instead of "exiting with code N"
  std::vector<std::string>* summary = nullptr;  // receives the failure summary's lines
  int* failed_rank = nullptr;                   // receives the first failed rank (-1: none)
  // --recovery inplace: told of each rank that fails while others still run (how: "SIGKILL", "exit 3"); those
  // others go on, and the attempt succeeds when they end normally.
  std::function<void(int rank, pid_t pid, const std::string& how)> on_lost;
  // With on_lost: how many lost ranks may be replaced (a rank started in the lost one's place, with these variables
  // added to its environment); each counts as a restart (AttemptOutcome::replacements).
  int replacements = 0;
  // With on_lost, on one node: a loss that leaves fewer ranks running (a replacement counts from its start) fails
  // the attempt instead, and starts no replacement.
  int min_ranks = 1;
  // With on_lost: also when none of this node's other ranks runs (several nodes: the others' ranks may). A loss
  // that nothing replaces then fails this node's attempt, as without on_lost.
  bool alone_too = false;
  std::vector<std::pair<std::string, std::string>> replacement_env;
};
AttemptOutcome run_local(const Options& options, const std::string& exec_path, const Attempt& attempt,
                         const LocalLaunchExtras& extras);

}  // namespace ddprun
