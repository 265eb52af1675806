// SGD state in PyTorch's optimizer.state_dict() format, and the CPU generator's state.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/string_utils.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"

namespace ddp::train {
namespace {

using torch::optim::SGDOptions;
using torch::optim::SGDParamState;
using GenericDict = c10::impl::GenericDict;

// LibTorch keys optimizer state by the parameter's TensorImpl address, as a string.
std::string state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

[[noreturn]] void bad(const std::string& what) { throw InvalidArgument("load_optimizer_state_dict: " + what); }

const c10::IValue* find(const GenericDict& d, const std::string& key) {
  auto it = d.find(c10::IValue(key));
  return it == d.end() ? nullptr : &it->value();
}

// param_groups[g][key] as a double (Python writes 0 for dampening, an int).
double number(const GenericDict& group, const std::string& key, size_t g, std::optional<double> fallback) {
  const c10::IValue* v = find(group, key);
  const std::string where = "param_groups[" + std::to_string(g) + "][\"" + key + "\"]";
  if (!v) {
    if (fallback) return *fallback;
    bad(where + " is missing");
  }
  if (v->isDouble()) return v->toDouble();
  if (v->isInt()) return static_cast<double>(v->toInt());
  bad(where + " is a " + v->tagKind() + ", not a number");
}

bool flag(const GenericDict& group, const std::string& key, size_t g) {
  const c10::IValue* v = find(group, key);
  if (!v || v->isNone()) return false;
  if (!v->isBool()) bad("param_groups[" + std::to_string(g) + "][\"" + key + "\"] is a " + v->tagKind() + ", not a bool");
  return v->toBool();
}

SGDOptions group_options(const GenericDict& group, size_t g) {
  SGDOptions o(number(group, "lr", g, std::nullopt));
  o.momentum(number(group, "momentum", g, 0.0))
      .dampening(number(group, "dampening", g, 0.0))
      .weight_decay(number(group, "weight_decay", g, 0.0))
      .nesterov(flag(group, "nesterov", g));
  if (flag(group, "maximize", g)) bad("param_groups[" + std::to_string(g) + "] has maximize=True; LibTorch's SGD cannot");
  if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0))
    bad("param_groups[" + std::to_string(g) + "]: nesterov needs momentum > 0 and dampening 0");
  return o;
}

}  // namespace

c10::IValue optimizer_state_dict(const torch::optim::SGD& opt) {
  GenericDict state(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : opt.param_groups()) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    GenericDict g(c10::StringType::get(), c10::AnyType::get());
    g.insert("lr", o.lr());
    g.insert("momentum", o.momentum());
    g.insert("dampening", o.dampening());
    g.insert("weight_decay", o.weight_decay());
    g.insert("nesterov", o.nesterov());
    g.insert("maximize", false);  // what Python 1.13 writes besides; LibTorch's SGD has no such options
    g.insert("foreach", c10::IValue());
    g.insert("differentiable", false);
    c10::List<int64_t> ids;
    for (const auto& p : group.params()) {
      auto it = opt.state().find(state_key(p));
      if (it != opt.state().end()) {
        const auto& buf = static_cast<const SGDParamState&>(*it->second).momentum_buffer();
        if (buf.defined()) {
          GenericDict ps(c10::StringType::get(), c10::AnyType::get());  // a plain dict, as in Python
          ps.insert("momentum_buffer", buf.detach().clone());
          state.insert(index, ps);
        }
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

void load_optimizer_state_dict(torch::optim::SGD& opt, const c10::IValue& state) {
  if (!state.isGenericDict())
    bad("expected optimizer.state_dict()'s dict with \"state\" and \"param_groups\", found " + state.tagKind());
  const GenericDict top = state.toGenericDict();
  const c10::IValue* saved_groups = find(top, "param_groups");
  const c10::IValue* saved_state = find(top, "state");
  if (!saved_groups || !saved_groups->isList()) bad("\"param_groups\" is missing or not a list");
  if (!saved_state || !saved_state->isGenericDict()) bad("\"state\" is missing or not a dict");

  auto& groups = opt.param_groups();
  const auto saved = saved_groups->toList();
  if (saved.size() != groups.size())
    bad("the state has " + std::to_string(saved.size()) + " param groups, the optimizer " +
        std::to_string(groups.size()) + " (another optimizer setup?)");
  std::vector<SGDOptions> options;
  std::unordered_map<int64_t, at::Tensor> by_id;  // Python's parameter indices -> our parameters, group by group
  for (size_t g = 0; g < saved.size(); ++g) {
    const c10::IValue gv = saved.get(g);
    if (!gv.isGenericDict()) bad("param_groups[" + std::to_string(g) + "] is not a dict");
    const GenericDict group = gv.toGenericDict();
    const c10::IValue* ids = find(group, "params");
    if (!ids || !ids->isList()) bad("param_groups[" + std::to_string(g) + "][\"params\"] is missing or not a list");
    const auto list = ids->toList();
    if (list.size() != groups[g].params().size())
      bad("param_groups[" + std::to_string(g) + "] has " + std::to_string(list.size()) + " parameters in the state, " +
          std::to_string(groups[g].params().size()) + " in the optimizer");
    for (size_t k = 0; k < list.size(); ++k) {
      const c10::IValue id = list.get(k);
      if (!id.isInt() || !by_id.emplace(id.toInt(), groups[g].params()[k]).second)
        bad("param_groups[" + std::to_string(g) + "][\"params\"][" + std::to_string(k) + "] is not a unique int");
    }
    options.push_back(group_options(group, g));
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> buffers;  // (parameter, momentum buffer)
  for (const auto& item : saved_state->toGenericDict()) {
    const auto it = item.key().isInt() ? by_id.find(item.key().toInt()) : by_id.end();
    if (it == by_id.end())
      bad("\"state\" has an entry for parameter " + c10::str(item.key()) + ", which no param group lists");
    const std::string where = "state[" + c10::str(item.key()) + "]";
    if (!item.value().isGenericDict()) bad(where + " is not a dict");
    const c10::IValue* buf = find(item.value().toGenericDict(), "momentum_buffer");
    if (!buf || buf->isNone()) continue;  // Python keeps None when momentum is 0
    if (!buf->isTensor()) bad(where + "[\"momentum_buffer\"] is a " + buf->tagKind() + ", not a tensor");
    const at::Tensor& t = buf->toTensor();
    if (t.sizes() != it->second.sizes())
      bad(where + "[\"momentum_buffer\"] has shape " + c10::str(t.sizes()) + ", its parameter " +
          c10::str(it->second.sizes()));
    buffers.emplace_back(it->second, t);
  }
  // Everything checked: replace options and state (as Python's load_state_dict does).
  for (size_t g = 0; g < groups.size(); ++g) {
    static_cast<SGDOptions&>(groups[g].options()) = options[g];
    for (const auto& p : groups[g].params()) opt.state().erase(state_key(p));
  }
  for (const auto& [param, buf] : buffers) {
    auto s = std::make_unique<SGDParamState>();
    s->momentum_buffer(buf.detach().to(param.scalar_type()).clone(at::MemoryFormat::Contiguous));
    opt.state()[state_key(param)] = std::move(s);
  }
}

at::Tensor get_rng_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Tensor& state) {
  const int64_t expected = get_rng_state().numel();
  if (!state.defined() || state.scalar_type() != at::kByte || !state.device().is_cpu() || state.dim() != 1 ||
      state.numel() != expected)
    throw InvalidArgument("set_rng_state: expected torch.get_rng_state()'s 1-D uint8 CPU tensor of " +
                          std::to_string(expected) + " bytes, got " +
                          (state.defined() ? std::string(c10::toString(state.scalar_type())) + " " +
                                                 c10::str(state.sizes()) + " on " + state.device().str()
                                           : std::string("an undefined tensor")));
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state.contiguous());
  } catch (const c10::Error& e) {
    throw InvalidArgument(std::string("set_rng_state: not a valid generator state: ") + e.what_without_backtrace());
  }
}

}  // namespace ddp::train
