// The multi-node elastic agent (--rdzv-backend c10d): rendezvous rounds (rendezvous.h) on the store at
// --rdzv-endpoint (rdzv_store.h), one attempt of this node's ranks per round, restarts across nodes.
#pragma once

#include <functional>

#include "cli/options.h"
#include "launch/elastic.h"

namespace ddprun {

// Starts this node's ranks for a round: the attempt's placement (node rank, world size, first rank, master
// address and port) is the rendezvous'.
using RoundLaunch = std::function<AttemptOutcome(const Attempt&)>;

// Runs rounds until one succeeds here, restarts are used up, the rendezvous fails or ddprun is stopped.
// Returns ddprun's exit code.
// Every round's attempt launches with `backend`.
int run_c10d(const Options& options, const LaunchBackend& backend, const RoundLaunch& launch);

}  // namespace ddprun
