// What the launch resolved from the options: the backend (once, in main) and, per attempt, where this node's
// ranks are in the job (fixed by the options for the static rendezvous, by each round with c10d).
#pragma once

#include <functional>
#include <string>

#include "cli/options.h"
#include "launch/backend_choice.h"

namespace ddprun {

// Where this node's ranks are in the job for one attempt.
struct Placement {
  int node_rank = 0;
  int nnodes = 1;
  int world_size = 1;  // the job's ranks
  int first_rank = 0;  // this node's first
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // the port the ranks rendezvous at
};

// The static rendezvous: node ranks and the world as the options give them, at `master_addr:master_port`.
Placement static_placement(const Options& options, const std::string& master_addr, int master_port);

// What one attempt is started with.
struct Attempt {
  LaunchBackend backend;  // exported to the ranks (DDP_BACKEND, DDP_BACKEND_ON_GPU, DDP_BACKEND_REASON)
  Placement place;
  int restart_count = 0;  // 0 for the first attempt
  // Multi-node (c10d): checked every --monitor-interval while the ranks run; a
  // non-empty reason (another node failed, nodes wait to join) stops them.
  std::function<std::string()> external_stop;
  // --recovery inplace with c10d: this node attached to the running round (its ranks join the job); node 0 tells
  // the rendezvous of each node counted lost, and asks how many node ranks the round gave out.
  bool attached = false;
  std::function<void(int node)> node_lost;
  std::function<int()> node_ranks;
};

// How one attempt ended.
struct AttemptOutcome {
  AttemptOutcome(int code = 0, bool by_signal = false) : exit_code(code), stopped_by_signal(by_signal) {}
  int exit_code = 0;                // ddprun's exit code if it stopped now
  bool stopped_by_signal = false;   // ddprun got SIGINT/SIGTERM/...: never restart
  bool stopped_externally = false;  // Attempt::external_stop stopped the ranks (none failed here)
  std::string failure;              // one line naming what failed here (for the other nodes)
  int replacements = 0;             // --recovery inplace: lost ranks replaced, each a restart used
};

}  // namespace ddprun
