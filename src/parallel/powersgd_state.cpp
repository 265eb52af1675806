// PowerSGD's state in checkpoints, and its options from a --comm-hook spec.
#include <ATen/ATen.h>
#include <cmath>

#include <sstream>

#include "ddp/errors.h"
#include "ddp/parallel/powersgd.h"

namespace ddp {
namespace {

using GenericDict = c10::impl::GenericDict;

c10::Dict<int64_t, at::Tensor> to_dict(const std::map<size_t, at::Tensor>& m) {
  c10::Dict<int64_t, at::Tensor> d;
  for (const auto& [k, v] : m) d.insert(static_cast<int64_t>(k), v.clone());
  return d;
}

const c10::IValue& entry(const GenericDict& d, const std::string& key) {
  auto it = d.find(c10::IValue(key));
  if (it == d.end()) throw InvalidArgument("PowerSGDHook::load_state_dict: no \"" + key + "\" in the state");
  return it->value();
}

std::map<size_t, at::Tensor> from_dict(const c10::IValue& v, const std::string& key) {
  if (!v.isGenericDict()) throw InvalidArgument("PowerSGDHook::load_state_dict: \"" + key + "\" is not a dict");
  std::map<size_t, at::Tensor> m;
  for (const auto& e : v.toGenericDict()) {
    if (!e.key().isInt() || e.key().toInt() < 0 || !e.value().isTensor())
      throw InvalidArgument("PowerSGDHook::load_state_dict: \"" + key + "\" must map bucket indices to tensors");
    m[static_cast<size_t>(e.key().toInt())] = e.value().toTensor().clone();
  }
  return m;
}

int64_t to_int(const std::string& key, const std::string& value, const std::string& spec) {
  try {
    size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("comm hook '" + spec + "': " + key + "=" + value + " is not an integer");
}

double to_double(const std::string& key, const std::string& value, const std::string& spec) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("comm hook '" + spec + "': " + key + "=" + value + " is not a finite number");
}

bool to_bool(const std::string& key, const std::string& value, const std::string& spec) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  throw InvalidArgument("comm hook '" + spec + "': " + key + "=" + value + " must be 0, 1, true or false");
}

}  // namespace

c10::IValue PowerSGDHook::state_dict() const {
  GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert(std::string("hook"), name());
  d.insert(std::string("iter"), state_->iter);
  d.insert(std::string("rng"), state_->rng.state());
  d.insert(std::string("p"), to_dict(state_->p));
  d.insert(std::string("q"), to_dict(state_->q));
  d.insert(std::string("error"), to_dict(state_->error));
  d.insert(std::string("numel_before_compression"), state_->numel_before_compression);
  d.insert(std::string("numel_after_compression"), state_->numel_after_compression);
  return d;
}

void PowerSGDHook::load_state_dict(const c10::IValue& state) {
  if (!state.isGenericDict()) throw InvalidArgument("PowerSGDHook::load_state_dict: expected a dict");
  const GenericDict d = state.toGenericDict();
  const c10::IValue& hook = entry(d, "hook");
  if (!hook.isString() || hook.toStringRef() != name())
    throw InvalidArgument("PowerSGDHook::load_state_dict: the state is of hook '" +
                          (hook.isString() ? hook.toStringRef() : std::string("?")) + "', this hook is '" + name() +
                          "'");
  PowerSGDState next(state_->options);
  next.iter = entry(d, "iter").toInt();
  next.rng.set_state(entry(d, "rng").toTensor());
  next.p = from_dict(entry(d, "p"), "p");
  next.q = from_dict(entry(d, "q"), "q");
  next.error = from_dict(entry(d, "error"), "error");
  next.numel_before_compression = entry(d, "numel_before_compression").toInt();
  next.numel_after_compression = entry(d, "numel_after_compression").toInt();
  *state_ = std::move(next);
}

PowerSGDOptions parse_powersgd_spec(const std::string& spec, bool* batched) {
  const size_t colon = spec.find(':');
  const std::string head = spec.substr(0, colon);
  if (head != "powersgd" && head != "batched_powersgd")
    throw InvalidArgument("comm hook '" + spec + "': expected powersgd[:options] or batched_powersgd[:options]");
  if (batched) *batched = head == "batched_powersgd";
  PowerSGDOptions o;
  if (colon != std::string::npos) {
    std::stringstream items(spec.substr(colon + 1));
    for (std::string item; std::getline(items, item, ',');) {
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (eq == std::string::npos || value.empty())
        throw InvalidArgument("comm hook '" + spec + "': option '" + item + "' needs a value (key=value)");
      if (key == "rank")
        o.matrix_approximation_rank = to_int(key, value, spec);
      else if (key == "start")
        o.start_powerSGD_iter = to_int(key, value, spec);
      else if (key == "min_rate")
        o.min_compression_rate = to_double(key, value, spec);
      else if (key == "epsilon")
        o.orthogonalization_epsilon = to_double(key, value, spec);
      else if (key == "error_feedback")
        o.use_error_feedback = to_bool(key, value, spec);
      else if (key == "warm_start")
        o.warm_start = to_bool(key, value, spec);
      else if (key == "batch_same_shape")
        o.batch_tensors_with_same_shape = to_bool(key, value, spec);
      else if (key == "seed") {
        const int64_t s = to_int(key, value, spec);
        if (s < 0 || s > 0xffffffffLL)
          throw InvalidArgument("comm hook '" + spec + "': seed must be in [0, 2^32 - 1], got " + value);
        o.random_seed = static_cast<uint32_t>(s);
      } else {
        throw InvalidArgument("comm hook '" + spec + "': unknown option '" + key +
                              "'; valid: rank, start, min_rate, epsilon, error_feedback, warm_start, "
                              "batch_same_shape, seed");
      }
    }
  }
  PowerSGDState check(o);  // throws on out-of-range values, naming them
  return o;
}

}  // namespace ddp
