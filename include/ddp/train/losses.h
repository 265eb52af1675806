// Classification losses, per sample (reduction "none": the caller sums or averages).
//
//   at::Tensor loss = ddp::train::label_smoothing_cross_entropy(logits, target, 0.2).mean();
//
// With alpha = 0 it is the cross-entropy; otherwise (1 - alpha) * NLL + alpha *
// mean over classes of -log p, as PyTorch's F.cross_entropy(..., label_smoothing=alpha, reduction="none").
#pragma once
#include <ATen/core/Tensor.h>

namespace ddp::train {

// logits [N, C], target int64 [N] in [0, C) -> [N]. InvalidArgument on bad shapes or alpha outside [0, 1].
at::Tensor label_smoothing_cross_entropy(const at::Tensor& logits, const at::Tensor& target, double alpha);

}  // namespace ddp::train
