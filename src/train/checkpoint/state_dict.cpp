// state_dict / load_state_dict for modules, and state dicts as IValues and files.
#include "ddp/train/state_dict.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"
#include "train/checkpoint/torch_format.h"

namespace ddp::train {
namespace {

const char kDdpPrefix[] = "module.";

void collect(const torch::nn::Module& m, const std::string& prefix, StateDict& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    if (p.value().defined()) out.emplace_back(prefix + p.key(), p.value().detach());
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value().detach());
  for (const auto& c : m.named_children()) collect(*c.value(), prefix + c.key() + ".", out);
}

bool all_prefixed(const StateDict& sd) {
  return !sd.empty() &&
         std::all_of(sd.begin(), sd.end(), [](const auto& kv) { return kv.first.rfind(kDdpPrefix, 0) == 0; });
}

// "3 missing keys (a, b, c)" with at most 5 names.
std::string key_list(const std::vector<std::string>& keys, const std::string& what) {
  std::ostringstream s;
  s << keys.size() << " " << what << (keys.size() == 1 ? " key (" : " keys (");
  for (size_t i = 0; i < keys.size() && i < 5; ++i) s << (i ? ", " : "") << keys[i];
  if (keys.size() > 5) s << ", ... " << keys.size() - 5 << " more";
  s << ")";
  return s.str();
}

}  // namespace

StateDict state_dict(const torch::nn::Module& module) {
  StateDict out;
  collect(module, "", out);
  return out;
}

void load_state_dict(torch::nn::Module& module, const StateDict& sd, bool strict) {
  StateDict target = state_dict(module);  // detached aliases of the module's tensors
  // Saved from a DDP model (every key "module.x") into a plain one.
  const bool strip = all_prefixed(sd) && !all_prefixed(target);
  const size_t skip = strip ? sizeof(kDdpPrefix) - 1 : 0;
  std::unordered_map<std::string, const at::Tensor*> given;
  for (const auto& [name, tensor] : sd) {
    if (!given.emplace(name.substr(skip), &tensor).second)
      throw InvalidArgument("load_state_dict: key " + name + " appears twice in the state dict");
    if (!tensor.defined()) throw InvalidArgument("load_state_dict: key " + name + " holds an undefined tensor");
  }
  std::vector<std::string> missing, unexpected, mismatched;
  std::unordered_map<std::string, bool> known;
  for (const auto& [name, tensor] : target) {
    known[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const at::Tensor& v = *it->second;
    if (v.sizes() != tensor.sizes())
      mismatched.push_back(name + ": shape " + c10::str(v.sizes()) + " in the state dict, " + c10::str(tensor.sizes()) +
                           " in the module");
    else if (v.scalar_type() != tensor.scalar_type())
      mismatched.push_back(name + ": dtype " + std::string(c10::toString(v.scalar_type())) + " in the state dict, " +
                           c10::toString(tensor.scalar_type()) + " in the module");
  }
  for (const auto& [name, tensor] : sd)
    if (!known.count(name.substr(skip))) unexpected.push_back(name.substr(skip));

  std::vector<std::string> problems;
  if (strict && !missing.empty()) problems.push_back(key_list(missing, "missing"));
  if (strict && !unexpected.empty()) problems.push_back(key_list(unexpected, "unexpected"));
  for (size_t i = 0; i < mismatched.size() && i < 5; ++i) problems.push_back(mismatched[i]);
  if (mismatched.size() > 5) problems.push_back("... " + std::to_string(mismatched.size() - 5) + " more mismatches");
  if (!problems.empty()) {
    std::string msg = "load_state_dict: the state dict does not fit the module";
    if (strip) msg += " (after stripping the \"module.\" prefix)";
    for (const auto& p : problems) msg += "; " + p;
    msg += ". Saved from another architecture?";
    if (!mismatched.empty()) msg += " Shapes and dtypes must match.";
    if (strict && (!missing.empty() || !unexpected.empty())) msg += " strict=false loads the common keys only.";
    throw InvalidArgument(msg);
  }
  // Nothing is copied unless everything fits.
  c10::NoGradGuard no_grad;
  for (auto& [name, tensor] : target) {
    auto it = given.find(name);
    if (it != given.end()) tensor.copy_(*it->second);
  }
}

c10::IValue state_dict_to_ivalue(const StateDict& sd) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : sd) {
    if (!tensor.defined()) throw InvalidArgument("state dict entry " + name + " is an undefined tensor");
    if (!dict.insert(name, tensor).second) throw InvalidArgument("state dict key " + name + " appears twice");
  }
  return dict;
}

StateDict state_dict_from_ivalue(const c10::IValue& value, const std::string& where) {
  if (!value.isGenericDict())
    throw InvalidArgument(where + ": expected a state dict (a dict of name -> tensor), found " + value.tagKind());
  StateDict out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString())
      throw InvalidArgument(where + ": a state dict's keys are strings; found a key of type " + item.key().tagKind());
    const std::string& name = item.key().toStringRef();
    if (!item.value().isTensor())
      throw InvalidArgument(where + ": entry " + name + " is a " + item.value().tagKind() + ", not a tensor");
    out.emplace_back(name, item.value().toTensor());
  }
  return out;
}

void save_state_dict(const StateDict& sd, const std::string& path) { save_atomic(state_dict_to_ivalue(sd), path); }

StateDict load_state_dict_file(const std::string& path) {
  const c10::IValue v = detail::read_torch_file(path);
  if (v.isGenericDict()) {
    const auto dict = v.toGenericDict();
    const bool all_tensors =
        std::all_of(dict.begin(), dict.end(), [](const auto& it) { return it.value().isTensor(); });
    if (!all_tensors) {  // a checkpoint: its "model" (ours, and a common Python convention) or "state_dict"
      for (const char* key : {"model", "state_dict"}) {
        auto it = dict.find(c10::IValue(std::string(key)));
        if (it != dict.end()) return state_dict_from_ivalue(it->value(), path + " [\"" + key + "\"]");
      }
      throw InvalidArgument(path +
                            ": neither a state dict (name -> tensor) nor a checkpoint with a \"model\" or "
                            "\"state_dict\" entry");
    }
  }
  return state_dict_from_ivalue(v, path);
}

}  // namespace ddp::train
