// DDP's cheap default check that ranks agree on the work: in the first
// synchronising forward after the buckets are built, ranks compare their bucket layouts
// (count, dtype and size of each): rank 0 gathers 64-bit hashes and scatters
// the verdict (neither counts in ProcessGroup::traffic()); only
// on a mismatch do they exchange the layouts, and every rank throws ddp::Error
// naming each differing rank's view. Without it, buckets of different sizes
// meet in one all_reduce and gloo aborts the process (SIGABRT, EnforceNotMet).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp::detail {

// "2 buckets: float32[66902], float32[8]"
std::string describe_buckets(const std::vector<at::Tensor>& flats);
// `where`: the op its error names ("DistributedDataParallel forward").
void check_bucket_agreement(ProcessGroup& group, const std::vector<at::Tensor>& flats, const char* where);

}  // namespace ddp::detail
