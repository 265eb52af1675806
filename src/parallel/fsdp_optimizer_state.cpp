// The optimizer state of a sharded model's rows in PyTorch's per-parameter format, both ways: what a DDP run's
// optimizer.state_dict() holds for the same model and param groups, so a checkpoint moves between DDP, ZeRO
// and sharded runs and between world sizes. Each parameter's per-element state (momentum, exp_avg, ...) is
// its rows on each rank, concatenated in rank order; the step count is each one's.
#include <ATen/ATen.h>

#include <map>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_shard.h"
#include "ddp/parallel/optimizer_state.h"
#include "dist/error_context.h"
#include "parallel/fsdp_optimizer.h"

namespace ddp {
namespace detail {
namespace {

using GenericDict = c10::impl::GenericDict;

const c10::IValue& entry(const GenericDict& d, const std::string& key, const ErrorContext& ctx) {
  auto it = d.find(c10::IValue(key));
  if (it == d.end()) throw_invalid(ctx, "the optimizer state has no \"" + key + "\"");
  return it->value();
}

}  // namespace

bool per_element(const std::string& key, const c10::IValue& v) { return key != "step" && v.isTensor(); }

std::vector<const ShardedParam*> optimizer_params(const FsdpState& state, const torch::optim::Optimizer& optimizer,
                                                  const ErrorContext& ctx) {
  std::map<const c10::TensorImpl*, const ShardedParam*> mine;
  for (const auto& unit : state.units())
    for (const auto& p : unit->params()) mine[p.shard.unsafeGetTensorImpl()] = &p;
  std::vector<const ShardedParam*> out;
  for (const auto& group : optimizer.param_groups())
    for (const auto& t : group.params()) {
      auto it = mine.find(t.unsafeGetTensorImpl());
      if (it == mine.end())
        throw_invalid(ctx, "the optimizer steps a tensor of shape " + c10::str(t.sizes()) +
                               " that is not one of this model's shards; build it over parameters()");
      out.push_back(it->second);
    }
  return out;
}

}  // namespace detail

c10::IValue ShardedModel::full_optimizer_state_dict(const torch::optim::Optimizer& optimizer, int dst) {
  using detail::GenericDict;
  const ProcessGroup& g = state_->group();
  const int w = g.size();
  ErrorContext ctx{g.backend(), g.rank(), w, "full_optimizer_state_dict"};
  const auto params = detail::optimizer_params(*state_, optimizer, ctx);
  std::vector<c10::IValue> all = gather_object(optimizer_state_dict(optimizer), dst, state_->group_ptr());
  if (g.rank() != dst) return c10::IValue();
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  const GenericDict first = detail::entry(all[0].toGenericDict(), "state", ctx).toGenericDict();
  for (const auto& item : first) {
    const int64_t id = item.key().toInt();
    const detail::ShardedParam& p = *params.at(size_t(id));
    GenericDict ps(c10::StringType::get(), c10::AnyType::get());
    for (const auto& kv : item.value().toGenericDict()) {
      const std::string key = kv.key().toStringRef();
      if (!detail::per_element(key, kv.value())) {
        ps.insert(key, kv.value());
        continue;
      }
      std::vector<at::Tensor> rows;  // each rank's, in rank order
      for (int k = 0; k < w; ++k) {
        const GenericDict st = detail::entry(all[size_t(k)].toGenericDict(), "state", ctx).toGenericDict();
        auto s = st.find(c10::IValue(id));
        auto v = s == st.end() ? s : s->value().toGenericDict().find(kv.key());
        if (s == st.end() || v == s->value().toGenericDict().end() || !v->value().isTensor() ||
            v->value().toTensor().numel() != detail::rows_of_rank(p, k) * p.row_numel)
          throw_invalid(ctx, "'" + p.names[0] + "': \"" + key + "\" is missing on rank " + std::to_string(k) +
                                 " or not of its rows' size");
        rows.push_back(v->value().toTensor().reshape({-1}));
      }
      ps.insert(key, at::cat(rows).view(p.shape).clone());
    }
    state.insert(id, ps);
  }
  GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("state", state);
  out.insert("param_groups", detail::entry(all[0].toGenericDict(), "param_groups", ctx));
  return out;
}

void ShardedModel::load_full_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& full) {
  using detail::GenericDict;
  const ProcessGroup& g = state_->group();
  ErrorContext ctx{g.backend(), g.rank(), g.size(), "load_full_optimizer_state_dict"};
  if (!full.isGenericDict()) throw_invalid(ctx, "the optimizer state is not a dict");
  const GenericDict top = full.toGenericDict();
  const auto params = detail::optimizer_params(*state_, optimizer, ctx);
  size_t covered = 0;
  for (const c10::IValue& group : detail::entry(top, "param_groups", ctx).toList())
    covered += detail::entry(group.toGenericDict(), "params", ctx).toList().size();
  if (covered != params.size())
    throw_invalid(ctx, "the optimizer state covers " + std::to_string(covered) + " parameters, the model has " +
                           std::to_string(params.size()) + "; it was saved from another model or param groups");
  GenericDict shards(c10::IntType::get(), c10::AnyType::get());
  for (const auto& item : detail::entry(top, "state", ctx).toGenericDict()) {
    const int64_t id = item.key().toInt();
    if (id < 0 || size_t(id) >= params.size())
      throw_invalid(ctx,
                    "the optimizer state has parameter " + std::to_string(id) + " of " + std::to_string(params.size()));
    const detail::ShardedParam& p = *params[size_t(id)];
    GenericDict st(c10::StringType::get(), c10::AnyType::get());
    for (const auto& kv : item.value().toGenericDict()) {
      const std::string key = kv.key().toStringRef();
      if (!detail::per_element(key, kv.value())) {
        st.insert(key, kv.value());
        continue;
      }
      const at::Tensor& whole = kv.value().toTensor();
      if (whole.sizes() != at::IntArrayRef(p.shape))
        throw_invalid(ctx, "the optimizer state's \"" + key + "\" of '" + p.names[0] + "' has shape " +
                               c10::str(whole.sizes()) + ", the parameter " + c10::str(at::IntArrayRef(p.shape)));
      const int64_t start = std::min(p.rows, g.rank() * p.chunk);
      st.insert(key,
                whole.reshape({p.rows, p.row_numel}).narrow(0, start, p.local_rows).reshape(p.shard.sizes()).clone());
    }
    shards.insert(id, st);
  }
  GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("state", shards);
  out.insert("param_groups", detail::entry(top, "param_groups", ctx));
  load_optimizer_state_dict(optimizer, out);
}

}  // namespace ddp
