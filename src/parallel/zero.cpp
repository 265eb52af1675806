#include "ddp/parallel/zero.h"

#include <ATen/ATen.h>
#include <c10/util/irange.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <numeric>

#include "ddp/dist/collectives.h"
#include "ddp/dist/init.h"
#include "ddp/errors.h"
#include "ddp/parallel/optimizer_state.h"
#include "dist/ivalue_tensors.h"

namespace ddp {
namespace {

using GenericDict = c10::impl::GenericDict;

std::vector<torch::optim::OptimizerParamGroup> as_one_group(std::vector<at::Tensor> params) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  return groups;
}

GenericDict dict(c10::TypePtr key) { return GenericDict(std::move(key), c10::AnyType::get()); }

const c10::IValue& entry(const GenericDict& d, const char* key, const char* what) {
  auto it = d.find(c10::IValue(std::string(key)));
  if (it == d.end()) throw InvalidArgument(std::string("ZeroRedundancyOptimizer::") + what + ": no \"" + key + "\"");
  return it->value();
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params, Factory make, ZeroOptions options)
    : ZeroRedundancyOptimizer(as_one_group(std::move(params)), std::move(make), std::move(options)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, Factory make,
                                                 ZeroOptions options)
    : group_(options.group ? options.group : default_group()) {
  const int world = group_->size(), me = group_->rank();
  for (const auto& group : groups) {
    group_size_.push_back(group.params().size());
    params_.insert(params_.end(), group.params().begin(), group.params().end());
  }
  if (params_.empty()) throw InvalidArgument("ZeroRedundancyOptimizer: no parameters to optimize");
  // PyTorch's partition: per group, largest first (ties in the given order), each to
  // the rank with the fewest elements so far (the lowest such rank), sizes carried across groups.
  owner_.assign(params_.size(), 0);
  local_order_.assign(groups.size(), {});
  std::vector<int64_t> load(size_t(world), 0);
  size_t first = 0;
  std::vector<torch::optim::OptimizerParamGroup> mine;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<size_t> order(group_size_[g]);
    std::iota(order.begin(), order.end(), first);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
    std::vector<at::Tensor> local;
    for (size_t i : order) {
      const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
      owner_[i] = r;
      load[size_t(r)] += params_[i].numel();
      if (r == me) {
        local_order_[g].push_back(i);
        local.push_back(params_[i]);
      }
    }
    if (groups[g].has_options())
      mine.emplace_back(std::move(local), groups[g].options().clone());
    else
      mine.emplace_back(std::move(local));
    first += group_size_[g];
  }
  local_ = make(std::move(mine));
  if (!local_ || local_->param_groups().size() != groups.size())
    throw InvalidArgument("ZeroRedundancyOptimizer: the factory must build an optimizer over the " +
                          std::to_string(groups.size()) + " param group(s) it is given");
}

namespace {
std::vector<torch::optim::OptimizerParamGroup> groups_of(const torch::optim::Optimizer& like) {
  if (!like.state().empty())
    throw InvalidArgument(
        "ZeroRedundancyOptimizer: the optimizer to shard has state already (it stepped); shard it "
        "before its first step");
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& g : like.param_groups()) groups.emplace_back(g.params(), g.options().clone());
  return groups;
}
}  // namespace

ZeroRedundancyOptimizer::Factory ZeroRedundancyOptimizer::factory_like(const torch::optim::Optimizer& like) {
  using namespace torch::optim;
  if (auto* sgd = dynamic_cast<const SGD*>(&like)) {
    const auto defaults = static_cast<const SGDOptions&>(sgd->defaults());
    return [defaults](std::vector<OptimizerParamGroup> g) { return std::make_unique<SGD>(std::move(g), defaults); };
  }
  if (auto* adamw = dynamic_cast<const AdamW*>(&like)) {
    const auto defaults = static_cast<const AdamWOptions&>(adamw->defaults());
    return [defaults](std::vector<OptimizerParamGroup> g) { return std::make_unique<AdamW>(std::move(g), defaults); };
  }
  if (auto* adam = dynamic_cast<const Adam*>(&like)) {
    const auto defaults = static_cast<const AdamOptions&>(adam->defaults());
    return [defaults](std::vector<OptimizerParamGroup> g) { return std::make_unique<Adam>(std::move(g), defaults); };
  }
  throw InvalidArgument(
      "ZeroRedundancyOptimizer: can shard torch::optim::SGD, Adam and AdamW as built; for another "
      "optimizer give the constructor a Factory");
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const torch::optim::Optimizer& like, ZeroOptions options)
    : ZeroRedundancyOptimizer(groups_of(like), factory_like(like), std::move(options)) {}

void ZeroRedundancyOptimizer::step() {
  local_->step();
  broadcast_partitions();
}

// Each rank's parameters, packed per dtype into one buffer, broadcast from it.
void ZeroRedundancyOptimizer::broadcast_partitions() {
  if (group_->size() == 1) return;
  at::NoGradGuard no_grad;
  struct Packet {
    std::vector<size_t> params;
    at::Tensor flat;
    Work work;
  };
  std::vector<Packet> packets;
  for (int r = 0; r < group_->size(); ++r) {
    std::vector<std::vector<size_t>> by_dtype;
    std::vector<at::ScalarType> dtypes;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (owner_[i] != r) continue;
      auto it = std::find(dtypes.begin(), dtypes.end(), params_[i].scalar_type());
      if (it == dtypes.end()) {
        dtypes.push_back(params_[i].scalar_type());
        by_dtype.emplace_back();
        it = dtypes.end() - 1;
      }
      by_dtype[size_t(it - dtypes.begin())].push_back(i);
    }
    for (auto& ids : by_dtype) {
      std::vector<at::Tensor> views;
      for (size_t i : ids) views.push_back(params_[i].detach().reshape({-1}));
      Packet p{ids, at::cat(views), Work()};
      BroadcastOptions o;
      o.src = r;
      o.async_op = true;
      p.work = group_->broadcast(p.flat, o);
      packets.push_back(std::move(p));
    }
  }
  for (auto& p : packets) {
    p.work.wait();
    if (owner_[p.params.front()] == group_->rank()) continue;  // already up to date
    int64_t offset = 0;
    for (size_t i : p.params) {
      at::Tensor param = params_[i].detach();
      param.copy_(p.flat.narrow(0, offset, param.numel()).view(param.sizes()));
      offset += param.numel();
    }
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (auto& p : params_) {
    if (!p.grad().defined()) continue;
    p.mutable_grad().detach_();
    p.mutable_grad().zero_();
  }
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const { return optimizer_state_bytes(*local_); }

// Every rank's state, re-indexed from its optimizer's local order to the global
// one, gathered at `to`, which adds the param groups with every parameter's index.
void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const c10::IValue local = optimizer_state_dict(*local_);
  const GenericDict top = local.toGenericDict();
  const GenericDict local_state = entry(top, "state", "consolidate_state_dict").toGenericDict();
  // Local index k is the k-th parameter over this rank's groups, in its optimizer's order.
  std::vector<size_t> global_of;
  for (const auto& ids : local_order_) global_of.insert(global_of.end(), ids.begin(), ids.end());
  GenericDict mine = dict(c10::IntType::get());
  // On the CPU, as PyTorch's consolidated state: the same on rank `to` for its own partition as for the others'.
  for (const auto& item : local_state)
    mine.insert(int64_t(global_of.at(size_t(item.key().toInt()))),
                detail::map_tensors(item.value(), [](const at::Tensor& t) { return t.cpu(); }));
  std::vector<c10::IValue> all = gather_object(mine, to, group_);
  if (group_->rank() != to) {
    consolidated_.reset();
    return;
  }
  std::vector<std::pair<int64_t, c10::IValue>> entries;
  for (const auto& part : all)
    for (const auto& item : part.toGenericDict()) entries.emplace_back(item.key().toInt(), item.value());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  GenericDict state = dict(c10::IntType::get());
  for (auto& [k, v] : entries) state.insert(k, v);
  c10::impl::GenericList groups(c10::AnyType::get());
  const auto local_groups = entry(top, "param_groups", "consolidate_state_dict").toList();
  int64_t first = 0;
  for (size_t g = 0; g < group_size_.size(); ++g) {
    GenericDict settings = local_groups.get(g).toGenericDict().copy();
    c10::List<int64_t> ids;
    for (size_t k = 0; k < group_size_[g]; ++k) ids.push_back(first + int64_t(k));
    settings.insert_or_assign("params", ids);
    groups.push_back(settings);
    first += int64_t(group_size_[g]);
  }
  GenericDict out = dict(c10::StringType::get());
  out.insert("state", state);
  out.insert("param_groups", groups);
  consolidated_ = out;
}

const c10::IValue& ZeroRedundancyOptimizer::state_dict() const {
  if (!consolidated_)
    throw InvalidArgument("ZeroRedundancyOptimizer::state_dict: rank " + std::to_string(group_->rank()) +
                          " holds no consolidated state; call consolidate_state_dict(to) on every rank first, "
                          "then state_dict() on rank `to`");
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state_dict(const c10::IValue& full) {
  if (!full.isGenericDict()) throw InvalidArgument("ZeroRedundancyOptimizer::load_state_dict: expected a dict");
  const GenericDict top = full.toGenericDict();
  const GenericDict state = entry(top, "state", "load_state_dict").toGenericDict();
  const auto groups = entry(top, "param_groups", "load_state_dict").toList();
  if (groups.size() != group_size_.size())
    throw InvalidArgument("ZeroRedundancyOptimizer::load_state_dict: the state has " + std::to_string(groups.size()) +
                          " param groups, the optimizer " + std::to_string(group_size_.size()));
  // Saved indices are positions over all groups, as ours: keep this rank's, renumbered locally.
  GenericDict local_state = dict(c10::IntType::get());
  c10::impl::GenericList local_groups(c10::AnyType::get());
  int64_t local_index = 0;
  for (size_t g = 0; g < group_size_.size(); ++g) {
    GenericDict settings = groups.get(g).toGenericDict().copy();
    const auto saved_ids = entry(settings, "params", "load_state_dict").toList();
    if (saved_ids.size() != group_size_[g])
      throw InvalidArgument("ZeroRedundancyOptimizer::load_state_dict: param_groups[" + std::to_string(g) + "] has " +
                            std::to_string(saved_ids.size()) + " parameters, the optimizer " +
                            std::to_string(group_size_[g]));
    size_t first = 0;
    for (size_t h = 0; h < g; ++h) first += group_size_[h];
    c10::List<int64_t> ids;
    for (size_t i : local_order_[g]) {
      const c10::IValue saved = saved_ids.get(i - first);
      auto it = state.find(saved);
      if (it != state.end()) local_state.insert(local_index, it->value());
      ids.push_back(local_index++);
    }
    settings.insert_or_assign("params", ids);
    local_groups.push_back(settings);
  }
  GenericDict local = dict(c10::StringType::get());
  local.insert("state", local_state);
  local.insert("param_groups", local_groups);
  load_optimizer_state_dict(*local_, local);
}

}  // namespace ddp
