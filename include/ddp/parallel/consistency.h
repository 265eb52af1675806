// Are the replicas still identical? Rank 0 gathers every parameter from
// every rank and reports the largest difference per parameter.
#pragma once
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp {

struct ParameterDifference {
  std::string name;
  double max_abs_diff = 0;  // over all ranks, against rank 0's values
};

// Collective: every rank calls it. Rank 0 gets one entry per parameter,
// other ranks an empty list.
std::vector<ParameterDifference> check_parameter_consistency(torch::nn::Module& model, GroupPtr group = nullptr);

// Collective: true on every rank when all parameters agree within `tolerance`.
bool parameters_consistent(torch::nn::Module& model, double tolerance = 0, GroupPtr group = nullptr);

}  // namespace ddp
