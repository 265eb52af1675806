// Optimizer state in PyTorch's optimizer.state_dict() format (state by
// parameter index, param_groups listing indices), for every optimizer that
// optimizer_codecs.cpp knows.
#include "ddp/parallel/optimizer_state.h"

#include <ATen/ATen.h>

#include <memory>
#include <unordered_map>

#include "ddp/errors.h"
#include "parallel/optimizer_codecs.h"

namespace ddp {
namespace {

using detail::bad_optimizer_state;
using detail::find;
using detail::GenericDict;

}  // namespace

compat::OptimizerStateKey optimizer_state_key(const at::Tensor& p) { return compat::optimizer_state_key(p); }

c10::IValue optimizer_state_dict(const torch::optim::Optimizer& opt) {
  const detail::OptimizerCodec& codec = detail::codec_for(opt);
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : opt.param_groups()) {
    GenericDict g = codec.write_group(group.options());
    c10::List<int64_t> ids;
    for (const auto& p : group.params()) {
      auto it = opt.state().find(optimizer_state_key(p));
      if (it != opt.state().end()) {
        GenericDict ps = codec.write_state(*it->second);  // a plain dict, as in Python
        if (!ps.empty()) state.insert(index, ps);
      }
      ids.push_back(index++);
    }
    g.insert("params", ids);
    groups.push_back(g);
  }
  GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt) {
  const detail::OptimizerCodec& codec = detail::codec_for(opt);
  int64_t bytes = 0;
  for (const auto& [key, state] : opt.state())
    for (const at::Tensor& t : codec.tensors(*state))
      if (t.defined()) bytes += int64_t(t.nbytes());
  return bytes;
}

void load_optimizer_state_dict(torch::optim::Optimizer& opt, const c10::IValue& state) {
  const detail::OptimizerCodec& codec = detail::codec_for(opt);
  if (!state.isGenericDict())
    bad_optimizer_state("expected optimizer.state_dict()'s dict with \"state\" and \"param_groups\", found " +
                        state.tagKind());
  const GenericDict top = state.toGenericDict();
  const c10::IValue* saved_groups = find(top, "param_groups");
  const c10::IValue* saved_state = find(top, "state");
  if (!saved_groups || !saved_groups->isList()) bad_optimizer_state("\"param_groups\" is missing or not a list");
  if (!saved_state || !saved_state->isGenericDict()) bad_optimizer_state("\"state\" is missing or not a dict");

  auto& groups = opt.param_groups();
  const auto saved = saved_groups->toList();
  if (saved.size() != groups.size())
    bad_optimizer_state("the state has " + std::to_string(saved.size()) + " param groups, the optimizer " +
                        std::to_string(groups.size()) + " (another optimizer setup?)");
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  std::unordered_map<int64_t, at::Tensor> by_id;  // Python's parameter indices -> our parameters, group by group
  for (size_t g = 0; g < saved.size(); ++g) {
    const c10::IValue gv = saved.get(g);
    if (!gv.isGenericDict()) bad_optimizer_state("param_groups[" + std::to_string(g) + "] is not a dict");
    const GenericDict group = gv.toGenericDict();
    const c10::IValue* ids = find(group, "params");
    if (!ids || !ids->isList())
      bad_optimizer_state("param_groups[" + std::to_string(g) + "][\"params\"] is missing or not a list");
    const auto list = ids->toList();
    if (list.size() != groups[g].params().size())
      bad_optimizer_state("param_groups[" + std::to_string(g) + "] has " + std::to_string(list.size()) +
                          " parameters in the state, " + std::to_string(groups[g].params().size()) +
                          " in the optimizer");
    for (size_t k = 0; k < list.size(); ++k) {
      const c10::IValue id = list.get(k);
      if (!id.isInt() || !by_id.emplace(id.toInt(), groups[g].params()[k]).second)
        bad_optimizer_state("param_groups[" + std::to_string(g) + "][\"params\"][" + std::to_string(k) +
                            "] is not a unique int");
    }
    options.push_back(codec.read_group(group, g));
  }
  std::vector<std::pair<at::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>> states;
  for (const auto& item : saved_state->toGenericDict()) {
    const auto it = item.key().isInt() ? by_id.find(item.key().toInt()) : by_id.end();
    if (it == by_id.end())
      bad_optimizer_state("\"state\" has an entry for parameter " + c10::str(item.key()) +
                          ", which no param group lists");
    const std::string where = "state[" + c10::str(item.key()) + "]";
    if (!item.value().isGenericDict()) bad_optimizer_state(where + " is not a dict");
    auto st = codec.read_state(item.value().toGenericDict(), where, it->second);
    if (st) states.emplace_back(it->second, std::move(st));
  }
  // Everything checked: replace options and state (as Python's load_state_dict does).
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_options(std::move(options[g]));
    for (const auto& p : groups[g].params()) opt.state().erase(optimizer_state_key(p));
  }
  for (auto& [param, st] : states) opt.state()[optimizer_state_key(param)] = std::move(st);
}

}  // namespace ddp
