// Which job a rendezvous store belongs to. Two jobs started at once on one
// MASTER_PORT: the loser's rank 0 cannot listen, but its other ranks may reach
// the winner's store. Rank 0 writes its job id (TORCHELASTIC_RUN_ID, which
// ddprun and torchrun set; "none" without one) into the store as its first
// action; every other rank reads it, waiting until set, and compares before
// touching any other key. A mismatch fails at once, the winner undisturbed.
#pragma once
#include <string>

#include "ddp/dist/store.h"
#include "dist/env.h"

namespace ddp::detail {

// The store key holding the job id.
constexpr const char* kJobIdKey = "ddp_job_id";
// TORCHELASTIC_RUN_ID, or "none" when unset or empty.
std::string job_id();
// Rank 0: writes the id; others: read and compare, throwing ddp::Error
// ("... belongs to job 'abc', not to this job 'xyz' ...") on a mismatch.
void check_job_id(Store& store, const Rendezvous& r);

}  // namespace ddp::detail
