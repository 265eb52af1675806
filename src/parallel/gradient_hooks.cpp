// GradientHooks: add_post_hook on each accumulator, del_post_hook on destruction.
#include "parallel/gradient_hooks.h"

#include "dist/hook_waits.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "dist/hook_waits.h"

namespace ddp::detail {

GradientHooks::GradientHooks(std::vector<compat::AutogradNodePtr> accumulators, std::string hook,
                             std::function<void(size_t)> fn)
    : accumulators_(std::move(accumulators)) {
  auto shared = std::make_shared<std::function<void(size_t)>>(std::move(fn));
  auto name = std::make_shared<const std::string>(std::move(hook));
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    keys_.push_back(accumulators_[i]->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [shared, name, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          HookScope scope(name->c_str());
          (*shared)(i);
          return outputs;
        })));
  }
}

GradientHooks::~GradientHooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

std::vector<compat::AutogradNodePtr> GradientHooks::accumulators_of(const std::vector<at::Tensor>& params) {
  std::vector<compat::AutogradNodePtr> out;
  for (const auto& p : params) out.push_back(torch::autograd::impl::grad_accumulator(p));
  return out;
}

}  // namespace ddp::detail
