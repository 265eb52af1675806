// The backend-agnostic DistributedDataParallel suite: every case runs on
// every rank of a group and compares DDP training with a single-process run
// on the global batch (rtol 1.3e-6, atol 5e-5, as PyTorch's own test).
#pragma once
#include "support/collectives_suite.h"

namespace ddp::testing {

// The suites' group as the non-owning GroupPtr that DDPOptions and friends take.
inline GroupPtr handle(ProcessGroup& g) { return g.shared_from_this(); }
// "gloo rank 1/3 <what>": failure messages say where.
inline std::string tag(ProcessGroup& g, const std::string& what) {
  return g.backend() + " rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + what;
}

// DDP's cases, then sync_batch_norm_suite()'s.
const std::vector<SuiteCase>& ddp_suite();
// PowerSGD's cases (powersgd_suite.cpp), part of ddp_suite().
const std::vector<SuiteCase>& powersgd_suite();
// FullyShardedDataParallel against DDP (fsdp_suite.cpp), part of ddp_suite().
const std::vector<SuiteCase>& fsdp_suite();
// fully_shard of any model against one process (fully_shard_suite.cpp), part of ddp_suite().
const std::vector<SuiteCase>& fully_shard_suite();
// Join's cases (join_suite.cpp): uneven inputs, part of ddp_suite().
const std::vector<SuiteCase>& join_suite();
// DDP's steps make no host reads (step_reads_suite.cpp), part of ddp_suite().
const std::vector<SuiteCase>& step_reads_suite();
// SyncBatchNorm against BatchNorm on the global batch (sync_batch_norm_suite.cpp).
const std::vector<SuiteCase>& sync_batch_norm_suite();

}  // namespace ddp::testing
