#include "ddp/parallel/clip_grad.h"

#include <ATen/ATen.h>

#include <cmath>

namespace ddp {

double clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm, ProcessGroup* group) {
  const at::Device where = !grads.empty() ? grads[0].device() : group ? group->device() : at::Device(at::kCPU);
  // Each tensor's norm (no temporary of its size), then the sum of their squares.
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.norm().to(at::kFloat).reshape({1}));
  at::Tensor squares = norms.empty() ? at::zeros({1}, at::TensorOptions(where).dtype(at::kFloat))
                                     : at::cat(norms).pow(2).sum().reshape({1});
  if (group && group->size() > 1) group->all_reduce(squares);
  const double norm = std::sqrt(squares.item<double>());
  const double coef = max_norm / (norm + 1e-6);
  if (std::isfinite(norm) && coef < 1)
    for (const auto& g : grads) g.mul_(coef);
  return norm;
}

}  // namespace ddp
