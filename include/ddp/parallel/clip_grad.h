// Gradient clipping by the total norm (torch.nn.utils.clip_grad_norm_), over gradients that may be one rank's
// part of the model: with a group, the sums of squares are all-reduced over it (FSDP's rows), so that every rank
// scales by the whole model's norm.
//
//   at::Tensor norm = ddp::clip_grad_norm(grads, 1.0);               // DDP: every rank holds the averaged gradients
//   at::Tensor norm = ddp::clip_grad_norm(rows, 1.0, group.get());   // sharded: each rank its rows of each
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp {

// The total 2-norm of `grads` (float32 sums of squares, summed over `group` if given), and each one scaled in
// place by min(1, max_norm / (norm + 1e-6)), float32, as PyTorch computes it. A non-finite norm scales nothing:
// the gradients hold NaN or inf, which the caller reports (PyTorch's would turn every gradient into NaN).
// Returns the norm, a 0-dim float32 tensor on the gradients' device (the group's without gradients), the same on
// every rank of `group`. All of it runs on that device: nothing is read on the host (a GPU's host does not wait).
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, ProcessGroup* group = nullptr);

}  // namespace ddp
