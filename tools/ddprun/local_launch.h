// Launching the ranks of this node directly (gloo/auto backends).
#pragma once

#include <string>

#include "elastic.h"
#include "options.h"

namespace ddprun {

// One attempt: starts options.nproc_per_node copies of the program at
// exec_path, prints their output with "[rank N] " prefixes (and/or logs it,
// see rank_logs.h), supervises them and prints the failure summary.
AttemptOutcome run_local(const Options& options, const std::string& exec_path, const Attempt& attempt);

}  // namespace ddprun
