// all_reduce_coalesced in terms of all_reduce: tensors are packed into one
// flat buffer per dtype, reduced in one call each, and copied back on wait().
#pragma once
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp::detail {

Work all_reduce_coalesced_flat(ProcessGroup& group, std::vector<at::Tensor>& tensors,
                               const AllReduceOptions& opts);

}  // namespace ddp::detail
