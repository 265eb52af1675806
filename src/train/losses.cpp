#include "ddp/train/losses.h"

#include <ATen/ATen.h>

#include "ddp/errors.h"

namespace ddp::train {

at::Tensor label_smoothing_cross_entropy(const at::Tensor& logits, const at::Tensor& target, double alpha) {
  if (logits.dim() != 2)
    throw InvalidArgument("label_smoothing_cross_entropy: logits must be [N, C], got " + std::to_string(logits.dim()) +
                          " dims");
  if (target.dim() != 1 || target.size(0) != logits.size(0) || target.scalar_type() != at::kLong)
    throw InvalidArgument("label_smoothing_cross_entropy: target must be int64 [N] with N = " +
                          std::to_string(logits.size(0)));
  if (!(alpha >= 0 && alpha <= 1))
    throw InvalidArgument("label_smoothing_cross_entropy: alpha must be in [0, 1], got " + std::to_string(alpha));
  at::Tensor log_probs = at::log_softmax(logits, 1);
  at::Tensor nll = -log_probs.gather(1, target.unsqueeze(1)).squeeze(1);
  if (alpha == 0) return nll;
  return nll * (1 - alpha) + (-log_probs.mean(1)) * alpha;
}

}  // namespace ddp::train
