// What a sharded model's optimizer state and checkpoints share: which entries are per element, and the
// optimizer's parameters as the model's sharded ones.
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <string>
#include <vector>

#include "dist/error_context.h"
#include "parallel/fsdp_state.h"

namespace ddp::detail {

// Every entry of SGD's, Adam's and AdamW's state is one value per element, but the step count.
bool per_element(const std::string& key, const c10::IValue& v);
// The optimizer's parameters in its state_dict's numbering (its groups in order), as this model's;
// InvalidArgument on a tensor that is not one of its shards.
std::vector<const ShardedParam*> optimizer_params(const FsdpState& state, const torch::optim::Optimizer& optimizer,
                                                  const ErrorContext& ctx);

}  // namespace ddp::detail
