#include "ddp/parallel/clip_grad.h"

#include <ATen/ATen.h>

namespace ddp {

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, ProcessGroup* group) {
  const at::Device where = !grads.empty() ? grads[0].device() : group ? group->device() : at::Device(at::kCPU);
  // Each tensor's norm (no temporary of its size; accumulated and returned in float32, so that a 16-bit
  // gradient's norm above 65504 is not inf), then the sum of their squares.
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.norm(2, at::kFloat).reshape({1}));
  at::Tensor squares = norms.empty() ? at::zeros({1}, at::TensorOptions(where).dtype(at::kFloat))
                                     : at::cat(norms).pow(2).sum().reshape({1});
  if (group && group->size() > 1) group->all_reduce(squares);
  const at::Tensor norm = squares.sqrt().reshape({});
  // min(1, max_norm / (norm + 1e-6)); 1 where the norm is not finite, that is where norm - norm is not 0 (NaN:
  // isfinite and where have no meta kernel in LibTorch 1.13). x * 1 is x: below max_norm nothing changes.
  const at::Tensor coef = (max_norm / (norm + 1e-6)).clamp_max(1.0).masked_fill((norm - norm).ne(0), 1.0);
  for (const auto& g : grads) g.mul_(coef);
  return norm;
}

}  // namespace ddp
