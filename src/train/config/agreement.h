// ddp-train's check, at start, that every rank got the same settings: ranks
// all_gather a 64-bit hash of the settings the table marks kAgreed (settings.h);
// only on a mismatch do they exchange the settings, and every rank throws
// ddp::InvalidArgument naming each differing option and the ranks' values:
//   "ranks disagree on the configuration: --batch-size is 64 on rank 0 but 32 on rank 1"
// Ranks that disagree would otherwise meet in collectives of different sizes
// (gloo aborts) or wait for each other forever. --data-dir may differ (a
// node-local path) and --progress only concerns rank 0: neither is agreed.
#pragma once
#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"

namespace ddp::train {

void check_config_agreement(const TrainConfig& cfg, ProcessGroup& group);

}  // namespace ddp::train
