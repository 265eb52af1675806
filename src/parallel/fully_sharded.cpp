// FullyShardedDataParallel: a Sequential's children grouped into units by the wrap policy and sharded by
// ShardedModel, whose units this forward runs around the children they hold.
#include "ddp/parallel/fully_sharded.h"

#include <optional>

#include "ddp/errors.h"

namespace ddp {
namespace {

int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(torch::nn::Sequential module, FSDPOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  if (!module_) throw InvalidArgument("FullyShardedDataParallel: the module is null");
  if (options_.min_unit_params < 0)
    throw InvalidArgument("FullyShardedDataParallel: min_unit_params must be >= 0, got " +
                          std::to_string(options_.min_unit_params));
  // The wrap policy: which children form each unit.
  const auto children = module_->children();
  unit_of_child_.assign(children.size(), -1);
  std::vector<std::vector<torch::nn::Module*>> units;
  int64_t open = 0;  // parameters in the last unit so far
  for (size_t k = 0; k < children.size(); ++k) {
    const int64_t n = parameter_count(*children[k]);
    const bool join = !units.empty() && options_.min_unit_params > 0 && open < options_.min_unit_params &&
                      unit_of_child_[k - 1] == int(units.size());
    if (join) {
      units.back().push_back(children[k].get());
      open += n;
    } else if (n > 0) {
      units.push_back({children[k].get()});
      open = n;
    } else {
      continue;
    }
    unit_of_child_[k] = int(units.size());  // unit 0 is the root's
  }
  FullyShardOptions o;
  o.group = options_.group;
  o.replicate_group = options_.replicate_group;
  o.reshard_after_forward = options_.sharding_strategy == ShardingStrategy::FullShard;
  sharded_ = std::make_unique<ShardedModel>(module_.ptr(), units, o);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

at::Tensor FullyShardedDataParallel::forward(const at::Tensor& input) {
  detail::UnitForward root = sharded_->forward_scope();
  std::optional<detail::UnitForward> unit;
  at::Tensor x = input;
  const size_t n = unit_of_child_.size();
  size_t k = 0;
  for (auto& child : *module_) {
    const int u = unit_of_child_[k];
    if (u >= 0 && (k == 0 || unit_of_child_[k - 1] != u)) unit.emplace(sharded_->unit_scope(size_t(u)));
    x = child.forward(x);
    if (u >= 0 && (k + 1 == n || unit_of_child_[k + 1] != u)) {
      unit->after({x});
      unit.reset();
    }
    ++k;
  }
  root.after({x});
  return x;
}

}  // namespace ddp
