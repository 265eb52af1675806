// Stopping a run whose loss or gradients stop being finite numbers, before they reach the weights.
#pragma once
#include <torch/nn/module.h>

#include <optional>
#include <string>

namespace ddp::train::detail {

// True when every gradient of `model` is finite: one summing pass over the gradients, in float64 (a NaN or inf
// anywhere makes the sum non-finite; float32 values cannot overflow a float64 sum).
bool gradients_finite(const torch::nn::Module& model);

// The first parameter, in the model's order, whose gradient (gradients = true) holds NaN or inf; or (gradients =
// false) the first parameter or buffer whose value does. As "name (nan)" / "name (inf)"; nullopt if none.
std::optional<std::string> first_non_finite(const torch::nn::Module& model, bool gradients);

}  // namespace ddp::train::detail
