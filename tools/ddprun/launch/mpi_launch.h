// Launching the ranks through OpenMPI's mpirun (--backend mpi).
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "launch/elastic.h"

namespace ddprun {

// mpirun's command line: mpirun -np P --oversubscribe --bind-to none
// --tag-output [--allow-run-as-root] -x VAR... program args...
std::vector<std::string> build_mpirun_argv(const Options& options, const LaunchBackend& backend,
                                           const std::string& mpirun_path, const std::string& program_path,
                                           bool as_root);

// Names of the variables passed on with -x.
const std::vector<std::string>& mpi_exported_vars();

// Runs the program through mpirun, rewriting its tagged output to
// "[rank N] " prefixes and mpirun's own messages to "[mpirun] ". Returns
// how the attempt ended (a restart starts mpirun again).
AttemptOutcome run_mpi(const Options& options, const std::string& mpirun_path, const std::string& program_path,
                       const Attempt& attempt);

}  // namespace ddprun
