// Optimizer state in PyTorch's optimizer.state_dict() format, both ways, for
// torch::optim::SGD, Adam and AdamW: "state" maps a parameter's index (its
// position over all param groups) to its state (momentum_buffer; or step,
// exp_avg, exp_avg_sq[, max_exp_avg_sq]); "param_groups" lists each group's
// settings with Python 1.13's keys and its parameters' indices. Python's
// load_state_dict accepts what optimizer_state_dict writes, and back.
//
//   c10::IValue sd = ddp::optimizer_state_dict(adam);   // pickle it, or send it
//   ddp::load_optimizer_state_dict(adam2, sd);           // InvalidArgument on a mismatch
#pragma once
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <string>
#include "ddp/torch_compat.h"

namespace ddp {

// Other optimizer types: InvalidArgument naming the supported ones.
c10::IValue optimizer_state_dict(const torch::optim::Optimizer& opt);
// InvalidArgument on a mismatch (group count, parameter count, shapes, missing entries), naming it.
void load_optimizer_state_dict(torch::optim::Optimizer& opt, const c10::IValue& state);
// Bytes of the state tensors `opt` holds (counted in place, nothing copied).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt);
// The key LibTorch's optimizers file a parameter's state under (a string in 1.13, a pointer in 2.x).
compat::OptimizerStateKey optimizer_state_key(const at::Tensor& param);

}  // namespace ddp
