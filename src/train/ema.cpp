#include "ddp/train/ema.h"

#include <ATen/ATen.h>

#include "ddp/errors.h"

namespace ddp::train {
namespace {

// Parameters then buffers, by name; the two models must list the same names and shapes.
std::vector<std::pair<std::string, at::Tensor>> entries(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

// f(to's tensor, from's tensor) for each pair; `shadow_is_to`: which of the two is the averaged model (errors).
template <typename F>
void zip(torch::nn::Module& to, const torch::nn::Module& from, bool shadow_is_to, F&& f) {
  auto a = entries(to), b = entries(from);
  const std::string a_name = shadow_is_to ? "the averaged model" : "the model";
  const std::string b_name = shadow_is_to ? "the model" : "the averaged model";
  if (a.size() != b.size())
    throw InvalidArgument("ModelEma: " + a_name + " has " + std::to_string(a.size()) + " tensors, " + b_name + " " +
                          std::to_string(b.size()) + "; build both with the same architecture");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !a[i].second.sizes().equals(b[i].second.sizes()))
      throw InvalidArgument("ModelEma: tensor " + std::to_string(i) + " is " + a[i].first + " in " + a_name + " but " +
                            b[i].first + " in " + b_name +
                            " (or shapes differ); build both with the same architecture");
    f(a[i].second, b[i].second);
  }
}

}  // namespace

ModelEma::ModelEma(std::shared_ptr<torch::nn::Module> shadow, double rho) : shadow_(std::move(shadow)), rho_(rho) {
  if (!shadow_) throw InvalidArgument("ModelEma: the averaged model is null");
  if (!(rho >= 0 && rho <= 1)) throw InvalidArgument("ModelEma: rho must be in [0, 1], got " + std::to_string(rho));
  for (auto& p : shadow_->parameters()) p.set_requires_grad(false);
}

void ModelEma::copy_from(const torch::nn::Module& model) {
  zip(*shadow_, model, true, [](at::Tensor& e, const at::Tensor& m) { e.copy_(m); });
}

void ModelEma::update(const torch::nn::Module& model) { update(model, rho_); }

void ModelEma::update(const torch::nn::Module& model, double rho) {
  if (!(rho >= 0 && rho <= 1)) throw InvalidArgument("ModelEma: rho must be in [0, 1], got " + std::to_string(rho));
  zip(*shadow_, model, true, [rho](at::Tensor& e, const at::Tensor& m) {
    // ema + (1 - rho)(model - ema): exact where the two are equal (frozen weights stay bit for bit).
    if (at::isFloatingType(e.scalar_type()))
      e.lerp_(m, 1 - rho);
    else
      e.copy_(m);
  });
}

void ModelEma::copy_to(torch::nn::Module& model) const {
  zip(model, *shadow_, false, [](at::Tensor& m, const at::Tensor& e) { m.copy_(e); });
}

}  // namespace ddp::train
