// What the units of one sharded model share (FSDP2's root state): the order they ran in, the prefetches that
// follow it, and backward. Forward: a unit is gathered before it runs (the next one of the last forward's
// order starts gathering too), and after it released (reshard_after_forward) with hooks on its outputs that
// gather it again when backward reaches them (and start gathering the unit that ran before it), or kept.
// Backward: autograd hooks count each unit's gradients; units are reduce-scattered in the reverse of the
// forward's order, each as soon as its gradients are all in, asynchronously, then rested; nothing in a hook
// waits (dist/hook_waits.h). At the end of backward every reduction is waited for, units without gradients
// reduce zeros, and every unit is at rest.
#pragma once
#include <memory>
#include <vector>

#include "ddp/parallel/fully_shard.h"
#include "parallel/comm_timings.h"
#include "parallel/fsdp_unit.h"
#include "parallel/gradient_hooks.h"

namespace ddp::detail {

class FsdpState : public std::enable_shared_from_this<FsdpState> {
 public:
  FsdpState(GroupPtr group, bool reshard_after_forward, MixedPrecisionPolicy policy);
  ~FsdpState();

  // Units in construction order, the root's first; then hooks() once, before the first backward.
  void add(std::shared_ptr<FsdpUnit> unit);
  void hook_gradients();
  void hook(size_t u);  // (again) on unit u's accumulators

  void begin_forward();  // the root's forward starts
  void pre_forward(size_t u);
  void post_forward(size_t u, const std::vector<at::Tensor>& outputs);

  const std::vector<std::shared_ptr<FsdpUnit>>& units() const { return units_; }
  ProcessGroup& group() const { return *group_; }
  const GroupPtr& group_ptr() const { return group_; }
  const std::shared_ptr<GatheredBytes>& bytes() const { return bytes_; }
  const MixedPrecisionPolicy& policy() const { return policy_; }
  void set_replicate_group(GroupPtr g) { replicate_ = std::move(g); }
  const GroupPtr& replicate_group() const { return replicate_; }  // HSDP's; null without
  const DDPStats& stats() const { return timings_.stats(); }

 private:
  void pre_backward(size_t u);
  void on_gradient(size_t u);
  void launch_ready();
  void finalize();
  void reset();
  at::Device device() const;  // the shards' (the first unit holding any)

  GroupPtr group_, replicate_;
  bool reshard_after_forward_;
  MixedPrecisionPolicy policy_;
  std::shared_ptr<GatheredBytes> bytes_;
  std::vector<std::shared_ptr<FsdpUnit>> units_;
  std::vector<std::unique_ptr<GradientHooks>> hooks_;  // per unit
  std::vector<size_t> order_, last_order_;             // units as they first ran in this forward, and in the last one
  uint64_t forward_ = 0;                               // forwards begun
  std::vector<uint64_t> gathered_for_;                 // per unit: the forward it was last gathered for
  std::vector<size_t> arrived_;                        // per unit, gradients in this backward
  std::vector<size_t> launch_order_;                   // this backward's reduction order
  size_t launched_ = 0;
  bool in_backward_ = false;
  DeviceMark first_launch_;  // this backward's first reduce-scatter (comm_timings.h)
  CommTimings timings_;
};

}  // namespace ddp::detail
