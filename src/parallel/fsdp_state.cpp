#include "parallel/fsdp_state.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <optional>

#include "dist/error_context.h"

namespace ddp::detail {
namespace {

std::optional<size_t> neighbour(const std::vector<size_t>& order, size_t u, int step) {
  auto it = std::find(order.begin(), order.end(), u);
  if (it == order.end()) return std::nullopt;
  const auto k = int64_t(it - order.begin()) + step;
  if (k < 0 || k >= int64_t(order.size())) return std::nullopt;
  return order[size_t(k)];
}

}  // namespace

FsdpState::FsdpState(GroupPtr group, bool reshard_after_forward, MixedPrecisionPolicy policy)
    : group_(std::move(group)),
      reshard_after_forward_(reshard_after_forward),
      policy_(policy),
      bytes_(std::make_shared<GatheredBytes>()) {}

FsdpState::~FsdpState() = default;

void FsdpState::add(std::shared_ptr<FsdpUnit> unit) {
  units_.push_back(std::move(unit));
  gathered_for_.push_back(0);
  arrived_.push_back(0);
}

void FsdpState::hook_gradients() {
  hooks_.resize(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) hook(u);
}

void FsdpState::hook(size_t u) {
  const std::string name =
      ErrorContext{group_->backend(), group_->rank(), group_->size(), "fully_shard's gradient hook"}.prefix();
  hooks_[u] = std::make_unique<GradientHooks>(units_[u]->accumulators(), name, [this, u](size_t) { on_gradient(u); });
}

void FsdpState::begin_forward() {
  if (!order_.empty()) last_order_ = order_;
  order_.clear();
  ++forward_;
}

void FsdpState::pre_forward(size_t u) {
  if (std::find(order_.begin(), order_.end(), u) == order_.end()) order_.push_back(u);
  // Values gathered for an earlier forward may be stale (the optimizer stepped the shards since).
  units_[u]->start_gather(/*stale=*/gathered_for_[u] != forward_);
  gathered_for_[u] = forward_;
  units_[u]->finish_gather();
  // The next unit's gather overlaps this unit's forward; started once this one's buffer is copied out and gone,
  // so that at most one all_gather buffer is held besides the full units (FSDP2's order).
  if (auto next = neighbour(last_order_, u, +1); next && gathered_for_[*next] != forward_) {
    units_[*next]->start_gather(/*stale=*/true);
    gathered_for_[*next] = forward_;
  }
  if (units_[u]->take_accumulators_changed()) hook(u);
}

void FsdpState::post_forward(size_t u, const std::vector<at::Tensor>& outputs) {
  FsdpUnit& unit = *units_[u];
  bool backward_follows = false;
  for (const auto& t : outputs) backward_follows = backward_follows || (t.defined() && t.requires_grad());
  if (!at::GradMode::is_enabled() || !backward_follows) {
    unit.rest();
    return;
  }
  // The root stays for its backward, which comes first; so do all with reshard_after_forward off, and a unit
  // whose outputs hold no tensor to hook.
  if (u == 0 || !reshard_after_forward_) return;
  unit.release();
  std::weak_ptr<FsdpState> self = weak_from_this();
  for (const auto& t : outputs)
    if (t.defined() && t.requires_grad())
      t.register_hook([self, u](const at::Tensor&) {
        if (auto state = self.lock()) state->pre_backward(u);
      });
}

// As backward reaches a unit's outputs: gather it, and start gathering the one that ran before it.
void FsdpState::pre_backward(size_t u) {
  FsdpUnit& unit = *units_[u];
  if (!unit.awaits_backward()) return;  // gathered (kept, or reached by an earlier hook), or done
  unit.finish_gather();
  if (auto before = neighbour(order_, u, -1); before && units_[*before]->released()) units_[*before]->start_gather();
  if (unit.take_accumulators_changed()) hook(u);
}

void FsdpState::on_gradient(size_t u) {
  if (!in_backward_) {
    in_backward_ = true;
    launch_order_.assign(order_.rbegin(), order_.rend());
    for (size_t k = 0; k < units_.size(); ++k)
      if (std::find(order_.begin(), order_.end(), k) == order_.end()) launch_order_.push_back(k);
    std::weak_ptr<FsdpState> self = weak_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([self] {
      if (auto state = self.lock()) state->finalize();
    });
  }
  ++arrived_[u];
  launch_ready();
}

// Strictly in launch_order_, so every rank issues the same collectives in the same order whatever order its
// gradients arrive in.
void FsdpState::launch_ready() {
  while (launched_ < launch_order_.size()) {
    const size_t u = launch_order_[launched_];
    FsdpUnit& unit = *units_[u];
    if (arrived_[u] < unit.trainable_count()) return;
    // Reductions already done free their full-size buffers before the next unit's are made (HSDP: so does a
    // reduce-scatter done whose all-reduce over the replicas still runs); one in flight is left to the end.
    for (size_t k = 0; k < launched_; ++k) {
      FsdpUnit& before = *units_[launch_order_[k]];
      if (before.reduction_done())
        before.finish_gradients();
      else
        before.free_scatter_input();
    }
    if (launched_ == 0) first_launch_ = DeviceMark::now(device());
    unit.reduce_gradients();
    if (!unit.has_frozen()) unit.rest();  // every node that used these parameters has run
    ++launched_;
  }
}

void FsdpState::finalize() {
  try {
    const DeviceMark backward_end = DeviceMark::now(device());
    for (size_t u = 0; u < units_.size(); ++u) arrived_[u] = units_[u]->trainable_count();
    launch_ready();
    for (auto& unit : units_) {
      unit->finish_gradients();
      unit->rest();
    }
    timings_.add(first_launch_, backward_end, DeviceMark::now(device()));
  } catch (...) {
    reset();
    throw;
  }
  reset();
}

at::Device FsdpState::device() const {
  for (const auto& unit : units_)
    if (unit->packed_bytes() > 0) return unit->device();
  return at::Device(at::kCPU);
}

void FsdpState::reset() {
  std::fill(arrived_.begin(), arrived_.end(), 0);
  launch_order_.clear();
  launched_ = 0;
  in_backward_ = false;
  first_launch_ = DeviceMark();
}

}  // namespace ddp::detail
