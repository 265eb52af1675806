// FSDP's backward: autograd hooks count each unit's gradients; a unit whose
// gradients are all in is reduce-scattered at once (asynchronously, in
// descending unit order on every rank, the order backward reaches them) and its
// parameters are freed. Nothing in a hook waits (dist/hook_waits.h): a reduction
// found complete when the next unit launches is added into its shard's gradient
// there, freeing its full-size buffers; the rest are waited for once, at the end
// of backward. Units that got no gradient reduce zeros.
#pragma once
#include <memory>
#include <vector>

#include "parallel/gradient_hooks.h"
#include "parallel/sharded_unit.h"

namespace ddp::detail {

class ShardedBackward {
 public:
  explicit ShardedBackward(std::vector<std::shared_ptr<ShardedUnit>> units);
  ~ShardedBackward();
  ShardedBackward(const ShardedBackward&) = delete;
  ShardedBackward& operator=(const ShardedBackward&) = delete;

 private:
  void on_gradient(size_t unit);
  void launch_ready();
  void finalize();
  void reset();

  std::vector<std::shared_ptr<ShardedUnit>> units_;
  std::unique_ptr<GradientHooks> hooks_;  // on the units' accumulators
  std::vector<size_t> arrived_;           // per unit, gradients in this backward
  size_t launched_ = 0;                   // units reduced, from the last one down
  bool in_backward_ = false;
};

}  // namespace ddp::detail
