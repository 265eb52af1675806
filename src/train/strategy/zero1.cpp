// --strategy zero1: DistributedDataParallel for the gradients, ZeRO stage 1 for the
// optimizer (ZeroRedundancyOptimizer): each rank holds and steps the state of its
// partition of the parameters only, then every parameter is broadcast from its
// owner. The same updates as ddp's, about 1/W of its optimizer state per rank.
#include <ATen/ATen.h>

#include "ddp.h"
#include "ddp/parallel/zero.h"

namespace ddp::train::detail {
namespace {

class Zero1Strategy : public DdpStrategy {
 public:
  explicit Zero1Strategy(StrategyParts parts) : DdpStrategy(std::move(parts)) {
    auto like = make_optimizer_();  // the Task's optimizer: its type, groups and options, sharded
    ZeroOptions options;
    options.group = group_;
    zero_ = std::make_unique<ZeroRedundancyOptimizer>(*like, options);
  }

  torch::optim::Optimizer& optimizer() override { return zero_->local_optimizer(); }
  void zero_grad() override { zero_->zero_grad(); }
  void step() override { zero_->step(); }
  c10::IValue optimizer_state() override {
    zero_->consolidate_state_dict(0);
    return group_->rank() == 0 ? zero_->state_dict() : c10::IValue();
  }
  void load_optimizer_state(const c10::IValue& full) override { zero_->load_state_dict(full); }
  int64_t optimizer_state_bytes() const override { return zero_->local_state_bytes(); }
  std::string describe() const override { return "zero1"; }

 private:
  std::unique_ptr<ZeroRedundancyOptimizer> zero_;
};

[[maybe_unused]] const bool registered = register_strategy(
    "zero1", "DDP's gradients, the optimizer state sharded across ranks (ZeRO-1, ZeroRedundancyOptimizer)",
    [](StrategyParts parts) { return std::unique_ptr<Strategy>(std::make_unique<Zero1Strategy>(std::move(parts))); });

}  // namespace
}  // namespace ddp::train::detail
