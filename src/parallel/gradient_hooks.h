// One autograd post hook on each of some gradient accumulators, removed again on destruction: what DDP's reducer
// and FSDP's backward are fed by. fn(i) runs after accumulator i added a new gradient into its parameter's .grad().
// The accumulators are kept alive here (they hold the hooks). fn runs under a HookScope named `hook`
// (dist/hook_waits.h: nothing in it may wait for communication), which says the rank too.
//
//   GradientHooks hooks(GradientHooks::accumulators_of(params), ctx.prefix() + "...", [this](size_t i) { ... });
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ddp/torch_compat.h"

namespace torch::autograd {
struct Node;
}

namespace ddp::detail {

class GradientHooks {
 public:
  GradientHooks(std::vector<compat::AutogradNodePtr> accumulators, std::string hook, std::function<void(size_t)> fn);
  ~GradientHooks();
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;

  // Each parameter's gradient accumulator (parameters are leaves that require grad).
  static std::vector<compat::AutogradNodePtr> accumulators_of(const std::vector<at::Tensor>& params);
  torch::autograd::Node* accumulator(size_t i) const { return accumulators_[i].get(); }
  size_t size() const { return accumulators_.size(); }

 private:
  std::vector<compat::AutogradNodePtr> accumulators_;
  std::vector<uintptr_t> keys_;
};

}  // namespace ddp::detail
