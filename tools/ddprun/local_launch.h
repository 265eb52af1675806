// Launching the ranks of this node directly (gloo/auto backends).
#pragma once

#include <string>

#include "options.h"

namespace ddprun {

// Starts options.nproc_per_node copies of the program at exec_path, prints
// their output with "[rank N] " prefixes, supervises them and prints the
// failure summary. Returns ddprun's exit code.
int run_local(const Options& options, const std::string& exec_path, int master_port);

}  // namespace ddprun
