#include "parallel/sharded_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "dist/error_context.h"

namespace ddp::detail {

ShardedBackward::ShardedBackward(std::vector<std::shared_ptr<ShardedUnit>> units) : units_(std::move(units)) {
  arrived_.assign(units_.size(), 0);
  std::vector<compat::AutogradNodePtr> accumulators;
  std::vector<size_t> unit_of;  // accumulator -> its unit
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& acc : units_[u]->accumulators()) {
      accumulators.push_back(acc);
      unit_of.push_back(u);
    }
  }
  std::string name = "FullyShardedDataParallel's gradient hook: ";
  if (!units_.empty()) {
    const ProcessGroup& g = units_[0]->group();
    name = ErrorContext{g.backend(), g.rank(), g.size(), "FullyShardedDataParallel's gradient hook"}.prefix();
  }
  hooks_ = std::make_unique<GradientHooks>(std::move(accumulators), name,
                                           [this, unit_of](size_t i) { on_gradient(unit_of[i]); });
}

ShardedBackward::~ShardedBackward() = default;

void ShardedBackward::on_gradient(size_t unit) {
  if (!in_backward_) {
    in_backward_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
  }
  ++arrived_[unit];
  launch_ready();
}

// Strictly from the last unit down, so every rank issues the same collectives
// in the same order whatever order its gradients arrive in.
void ShardedBackward::launch_ready() {
  while (launched_ < units_.size()) {
    ShardedUnit& unit = *units_[units_.size() - 1 - launched_];
    if (arrived_[units_.size() - 1 - launched_] < unit.params().size()) return;
    // Reductions already done free their full-size buffers before the next
    // unit's are made; one still in flight is left to the end of backward.
    for (size_t k = 0; k < launched_; ++k) {
      ShardedUnit& before = *units_[units_.size() - 1 - k];
      if (before.reduction_done()) before.finish_gradients();
    }
    unit.reduce_gradients();
    unit.rest();  // every node that used these parameters has run
    ++launched_;
  }
}

void ShardedBackward::finalize() {
  try {
    for (size_t u = 0; u < units_.size(); ++u) arrived_[u] = units_[u]->params().size();
    launch_ready();
    for (auto& unit : units_) unit->finish_gradients();
  } catch (...) {
    reset();
    throw;
  }
  reset();
}

void ShardedBackward::reset() {
  std::fill(arrived_.begin(), arrived_.end(), 0);
  launched_ = 0;
  in_backward_ = false;
}

}  // namespace ddp::detail
