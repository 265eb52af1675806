// The optimizer state of FullyShardedDataParallel's shards in PyTorch's per-parameter
// format, both ways: what a DDP run's optimizer.state_dict() holds for the same model,
// so a checkpoint moves between DDP, ZeRO and FSDP runs and between world sizes.
//
// Shards:  {"state": {u: {"exp_avg": Tensor[S], "step": ...}}, "param_groups": [{..., "params": [0..U-1]}]}
// Whole:   {"state": {i: {"exp_avg": Tensor[shape of parameter i], ...}}, "param_groups": [{..., "params": [0..n-1]}]}
// A unit's per-element state (momentum, exp_avg, ...) is split over its parameters; the step count is each's.
#include <ATen/ATen.h>

#include <map>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/optimizer_state.h"
#include "dist/error_context.h"
#include "parallel/sharded_unit.h"

namespace ddp {
namespace {

using GenericDict = c10::impl::GenericDict;

GenericDict new_dict(const c10::TypePtr& key) { return GenericDict(key, c10::AnyType::get()); }

const c10::IValue& entry(const GenericDict& d, const std::string& key, const ErrorContext& ctx) {
  auto it = d.find(c10::IValue(key));
  if (it == d.end()) throw_invalid(ctx, "the optimizer state has no \"" + key + "\"");
  return it->value();
}

// The one param group of a state, its "params" replaced by 0..n-1.
c10::impl::GenericList one_group(const GenericDict& top, int64_t n, const ErrorContext& ctx) {
  const auto groups = entry(top, "param_groups", ctx).toList();
  if (groups.size() != 1)
    throw_invalid(ctx,
                  "the optimizer state has " + std::to_string(groups.size()) +
                      " param groups; a sharded model's optimizer has one (give every parameter the same options)");
  GenericDict g = groups.get(0).toGenericDict().copy();
  c10::List<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(i);
  g.insert_or_assign("params", ids);
  c10::impl::GenericList out(c10::AnyType::get());
  out.push_back(g);
  return out;
}

// Every entry of SGD's, Adam's and AdamW's state is one value per element, but the step count.
bool per_element(const std::string& key, const c10::IValue& v) { return key != "step" && v.isTensor(); }

}  // namespace

c10::IValue FullyShardedDataParallel::full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst) {
  const int w = group_->size();
  ErrorContext ctx{group_->backend(), group_->rank(), w, "FullyShardedDataParallel full_optimizer_state_dict"};
  if (optimizer.param_groups().size() != 1 || optimizer.param_groups()[0].params().size() != units_.size())
    throw_invalid(ctx, "the optimizer must be built over parameters() in one param group (" +
                           std::to_string(units_.size()) + " shards)");
  std::vector<c10::IValue> all = gather_object(optimizer_state_dict(optimizer), dst, group_);
  if (group_->rank() != dst) return c10::IValue();
  const auto names = module_->named_parameters().keys();
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = int64_t(i);
  GenericDict state = new_dict(c10::IntType::get());
  for (size_t u = 0; u < units_.size(); ++u) {
    const detail::ShardedUnit& unit = *units_[u];
    std::vector<GenericDict> shards;  // each rank's state of unit u
    for (int r = 0; r < w; ++r) {
      const GenericDict st = entry(all[size_t(r)].toGenericDict(), "state", ctx).toGenericDict();
      auto it = st.find(c10::IValue(int64_t(u)));
      if (it != st.end()) shards.push_back(it->value().toGenericDict());
    }
    if (shards.empty()) continue;  // not stepped yet
    if (shards.size() != size_t(w))
      throw_invalid(ctx, "unit " + std::to_string(u) + " has optimizer state on " + std::to_string(shards.size()) +
                             " of " + std::to_string(w) + " ranks");
    for (size_t i = 0; i < unit.names().size(); ++i) {
      GenericDict ps = new_dict(c10::StringType::get());
      for (const auto& item : shards[0]) {
        const std::string key = item.key().toStringRef();
        if (!per_element(key, item.value())) {
          ps.insert(key, item.value());
          continue;
        }
        std::vector<at::Tensor> parts;
        for (const auto& s : shards) {
          auto it = s.find(c10::IValue(key));
          if (it == s.end() || !it->value().isTensor() || it->value().toTensor().numel() != unit.shard_numel())
            throw_invalid(ctx, "unit " + std::to_string(u) + "'s \"" + key +
                                   "\" is missing on a rank or not of the shard's size");
          parts.push_back(it->value().toTensor().reshape({-1}));
        }
        ps.insert(key, at::cat(parts)
                           .narrow(0, unit.offset(i), c10::multiply_integers(unit.shape(i)))
                           .view(unit.shape(i))
                           .clone());
      }
      state.insert(index.at(unit.names()[i]), ps);
    }
  }
  GenericDict out = new_dict(c10::StringType::get());
  out.insert("state", state);
  out.insert("param_groups", one_group(all[0].toGenericDict(), int64_t(names.size()), ctx));
  return out;
}

void FullyShardedDataParallel::load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer,
                                                              const c10::IValue& full) {
  const int r = group_->rank();
  ErrorContext ctx{group_->backend(), r, group_->size(), "FullyShardedDataParallel load_full_optimizer_state_dict"};
  if (!full.isGenericDict()) throw_invalid(ctx, "the optimizer state is not a dict");
  const GenericDict top = full.toGenericDict();
  const auto names = module_->named_parameters().keys();
  const auto groups = entry(top, "param_groups", ctx).toList();
  if (groups.size() == 1) {
    const auto ids = entry(groups.get(0).toGenericDict(), "params", ctx).toList();
    if (ids.size() != names.size())
      throw_invalid(ctx, "the optimizer state covers " + std::to_string(ids.size()) + " parameters, the model has " +
                             std::to_string(names.size()) + "; it was saved from another model");
  }
  const GenericDict state = entry(top, "state", ctx).toGenericDict();
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = int64_t(i);
  GenericDict shards = new_dict(c10::IntType::get());
  for (size_t u = 0; u < units_.size(); ++u) {
    const detail::ShardedUnit& unit = *units_[u];
    std::vector<GenericDict> per_param;
    for (const auto& name : unit.names()) {
      auto it = state.find(c10::IValue(index.at(name)));
      if (it != state.end()) per_param.push_back(it->value().toGenericDict());
    }
    if (per_param.empty()) continue;
    if (per_param.size() != unit.names().size())
      throw_invalid(ctx, "the optimizer state holds " + std::to_string(per_param.size()) + " of the " +
                             std::to_string(unit.names().size()) + " parameters of unit " + std::to_string(u) + " (" +
                             unit.names()[0] + ", ...); a sharded optimizer steps all of a unit or none");
    const int64_t start = std::min(unit.numel(), int64_t(r) * unit.shard_numel());
    const int64_t mine = std::min(unit.shard_numel(), unit.numel() - start);
    GenericDict st = new_dict(c10::StringType::get());
    for (const auto& item : per_param[0]) {
      const std::string key = item.key().toStringRef();
      const c10::IValue& v = item.value();
      if (!per_element(key, v)) {
        st.insert(key, v);
        continue;
      }
      std::vector<at::Tensor> flat;
      for (size_t i = 0; i < per_param.size(); ++i) {
        auto it = per_param[i].find(c10::IValue(key));
        if (it == per_param[i].end() || !it->value().isTensor() ||
            it->value().toTensor().sizes() != at::IntArrayRef(unit.shape(i)))
          throw_invalid(ctx, "the optimizer state's \"" + key + "\" of '" + unit.names()[i] +
                                 "' is missing or not of its shape " + c10::str(at::IntArrayRef(unit.shape(i))));
        flat.push_back(it->value().toTensor().reshape({-1}));
      }
      at::Tensor shard = at::zeros({unit.shard_numel()}, v.toTensor().options());
      if (mine > 0) shard.narrow(0, 0, mine).copy_(at::cat(flat).narrow(0, start, mine));
      st.insert(key, shard);
    }
    shards.insert(int64_t(u), st);
  }
  GenericDict out = new_dict(c10::StringType::get());
  out.insert("state", shards);
  out.insert("param_groups", one_group(top, int64_t(units_.size()), ctx));
  load_optimizer_state_dict(optimizer, out);
}

}  // namespace ddp
