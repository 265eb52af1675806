// Restarts (--max-restarts, torchrun's elastic agent on one node): after a
// failed attempt every rank of this node is started again, with the same
// ranks and world size, a fresh rendezvous port and TORCHELASTIC_RESTART_COUNT
// one higher. Across nodes (--rdzv-backend c10d) c10d_agent.h runs the
// attempts instead: the rendezvous agrees on the port, the restart count and
// the world before each one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "launch/attempt.h"

namespace ddprun {

// The line that ends an attempt's failure summary instead of "exiting with
// code N" when another attempt follows; empty when none follows.
std::string restart_line(const Options& options, const Attempt& attempt, bool stopped_by_signal);

// Notes for the end of a failure summary about the restarts used (empty when
// --max-restarts is 0): "failed after 3 restarts (--max-restarts 3)" or
// "not restarting: ddprun received SIGTERM ...".
std::string restarts_note(const Options& options, const Attempt& attempt, int received_signal);

// ddp-train's exit code after SIGTERM, once the checkpoint every rank agreed on is written (kExitPreempted).
constexpr int kExitPreempted = 75;

// ddprun's exit code when it received `signal` and stopped the ranks: kExitPreempted when they were preempted (a rank
// exited with it: its checkpoint is complete), so that a scheduler above can requeue the job; else 128 + signal.
// Appends a note that says so to `notes` when preempted.
int signalled_exit_code(int signal, bool preempted, std::vector<std::string>* notes);

// Runs attempts until one succeeds, ddprun is stopped by a signal, or
// --max-restarts restarts were used. `first` is attempt 0 (its port checked by
// main()); each restart gets a fresh port. Returns ddprun's exit code.
int run_attempts(const Options& options, Attempt first, const std::function<AttemptOutcome(const Attempt&)>& launch);

}  // namespace ddprun
