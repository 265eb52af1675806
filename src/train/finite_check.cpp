#include "finite_check.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "dist/host_memory.h"

namespace ddp::train::detail {

// One sum per gradient in its own dtype (a single vectorised pass, no copy): NaN or inf when an element is,
// or when the sum overflows (elements near 1e33 in float32); only then is every element checked, exactly.
// (A float64 sum needs a converting pass: 5.7x the time on 0.4M values, AVX2.)
bool gradients_finite(const torch::nn::Module& model) {
  std::vector<at::Tensor> sums;
  for (const auto& p : model.parameters())
    if (p.grad().defined()) sums.push_back(p.grad().sum());
  if (sums.empty()) return true;
  if (std::isfinite(at::stack(sums).sum(at::kDouble).item<double>())) return true;
  for (const auto& p : model.parameters())
    if (p.grad().defined() && !at::isfinite(p.grad()).all().item<bool>()) return false;
  return true;  // finite elements whose sum overflowed
}

namespace {

std::optional<std::string> describe_if_non_finite(const std::string& name, const at::Tensor& t) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type()) || at::isfinite(t).all().item<bool>()) return std::nullopt;
  return name + " (" + (at::isnan(t).any().item<bool>() ? "nan" : "inf") + ")";
}

}  // namespace

std::optional<std::string> first_non_finite(const torch::nn::Module& model, bool gradients) {
  for (const auto& item : model.named_parameters())
    if (auto bad = describe_if_non_finite(item.key(), gradients ? item.value().grad() : item.value())) return bad;
  if (gradients) return std::nullopt;
  for (const auto& item : model.named_buffers())
    if (auto bad = describe_if_non_finite(item.key(), item.value())) return bad;
  return std::nullopt;
}

GradientSums sum_gradients(const torch::OrderedDict<std::string, at::Tensor>& named) {
  GradientSums out;
  std::vector<at::Tensor> sums;
  for (const auto& item : named) {
    const at::Tensor& g = item.value().grad();
    out.names.push_back(item.key());
    sums.push_back(g.defined() ? g.sum(at::kDouble) : at::zeros({}, item.value().options().dtype(at::kDouble)));
  }
  if (!sums.empty()) out.sums = at::stack(sums);
  return out;
}

std::optional<std::string> first_non_finite_sum(const at::Tensor& host, const std::vector<std::string>& names) {
  const double* v = ddp::detail::host_data<double>(host, "--nan-check's gradient sums");
  for (size_t i = 0; i < names.size(); ++i)
    if (!std::isfinite(v[i])) return names[i] + (std::isnan(v[i]) ? " (nan)" : " (inf)");
  return std::nullopt;
}

}  // namespace ddp::train::detail
