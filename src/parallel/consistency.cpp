#include "ddp/parallel/consistency.h"

#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"

namespace ddp {

std::vector<ParameterDifference> check_parameter_consistency(torch::nn::Module& model, GroupPtr group) {
  GroupPtr g = group ? group : default_group();
  std::vector<ParameterDifference> out;
  GatherOptions o;
  o.dst = 0;
  for (const auto& p : model.named_parameters()) {
    at::Tensor mine = p.value().detach().contiguous();
    std::vector<at::Tensor> all;
    if (g->rank() == 0)
      for (int r = 0; r < g->size(); ++r) all.push_back(at::empty_like(mine));
    g->gather(mine, all, o);
    if (g->rank() != 0) continue;
    double worst = 0;
    for (int r = 1; r < g->size(); ++r)
      worst = std::max(worst, (all[r].to(at::kDouble) - mine.to(at::kDouble)).abs().max().item<double>());
    out.push_back({p.key(), worst});
  }
  return out;
}

bool parameters_consistent(torch::nn::Module& model, double tolerance, GroupPtr group) {
  GroupPtr g = group ? group : default_group();
  double worst = 0;
  for (const auto& d : check_parameter_consistency(model, g)) worst = std::max(worst, d.max_abs_diff);
  at::Tensor t = at::full({1}, worst, at::kDouble);
  g->broadcast(t);
  return t.item<double>() <= tolerance;
}

}  // namespace ddp
