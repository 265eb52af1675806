// Stopping a run whose loss or gradients stop being finite numbers, before they reach the weights.
#pragma once
#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

namespace ddp::train::detail {

// True when every gradient of `model` is finite: one summing pass over the gradients, in float64 (a NaN or inf
// anywhere makes the sum non-finite; float32 values cannot overflow a float64 sum).
bool gradients_finite(const torch::nn::Module& model);

// The first parameter, in the model's order, whose gradient (gradients = true) holds NaN or inf; or (gradients =
// false) the first parameter or buffer whose value does. As "name (nan)" / "name (inf)"; nullopt if none.
std::optional<std::string> first_non_finite(const torch::nn::Module& model, bool gradients);

// --nan-check-at next-step: each gradient summed in float64, stacked on the gradients' device; nothing is read on
// the host. A sum is non-finite exactly where its gradient holds a NaN or inf (a float64 sum of float32, bfloat16
// or float16 values cannot overflow).
struct GradientSums {
  at::Tensor sums;                 // float64, one per name; undefined when there is no parameter
  std::vector<std::string> names;  // the parameters', in order
};
// Of every parameter in `named` (a parameter without a gradient sums to 0, so that every rank's vector of the same
// parameters has the same length).
GradientSums sum_gradients(const torch::OrderedDict<std::string, at::Tensor>& named);
// The first name whose sum (`host`: on the CPU, float64) is not finite, as "name (inf)", or "name (nan)" (a NaN,
// or infinities of both signs); nullopt if none.
std::optional<std::string> first_non_finite_sum(const at::Tensor& host, const std::vector<std::string>& names);

}  // namespace ddp::train::detail
