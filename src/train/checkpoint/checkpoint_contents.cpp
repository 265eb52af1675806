// The checkpoint dict: CheckpointContents <-> {"model", "optimizer", "epoch", ...}.
#include <ATen/ATen.h>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"

namespace ddp::train {
namespace {

using GenericDict = c10::impl::GenericDict;

void check_plain(const PlainDict& d, const std::string& name) {
  for (const auto& item : d) {
    const c10::IValue& v = item.value();
    if (!item.key().isString())
      throw InvalidArgument("checkpoint " + name + " has a key of type " + item.key().tagKind() + "; keys are strings");
    if (!v.isInt() && !v.isDouble() && !v.isBool() && !v.isString())
      throw InvalidArgument("checkpoint " + name + "[\"" + item.key().toStringRef() + "\"] is a " + v.tagKind() + "; " +
                            name + " holds ints, doubles, bools and strings only (put other values in extra)");
  }
}

// A dict with string keys, as PlainDict (values unchecked: Python checkpoints may hold anything).
PlainDict string_keyed(const c10::IValue& v, const std::string& where) {
  if (!v.isGenericDict()) throw InvalidArgument(where + " is a " + v.tagKind() + ", not a dict");
  PlainDict out = plain_dict();
  for (const auto& item : v.toGenericDict()) {
    if (!item.key().isString()) throw InvalidArgument(where + " has a key of type " + item.key().tagKind());
    out.insert(item.key().toStringRef(), item.value());
  }
  return out;
}

}  // namespace

c10::IValue to_ivalue(const CheckpointContents& c) {
  check_plain(c.sampler, "sampler");
  check_plain(c.schedule, "schedule");
  check_plain(c.config, "config");
  GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("model", state_dict_to_ivalue(c.model));
  d.insert("optimizer", c.optimizer);
  d.insert("epoch", c.epoch);
  d.insert("step", c.step);
  PlainDict rng = plain_dict();
  if (c.rng.defined()) rng.insert("cpu", c.rng);
  d.insert("rng", rng);
  d.insert("sampler", c.sampler);
  d.insert("schedule", c.schedule);
  d.insert("config", c.config);
  for (const auto& item : c.extra)
    if (!item.key().isString())
      throw InvalidArgument("checkpoint extra has a key of type " + item.key().tagKind() + "; keys are strings");
  d.insert("extra", c.extra);
  return d;
}

CheckpointContents checkpoint_from_ivalue(const c10::IValue& value, const std::string& where) {
  const PlainDict d = string_keyed(value, where);
  auto get = [&](const char* key) -> const c10::IValue* {
    auto it = d.find(c10::IValue(key));
    return it == d.end() ? nullptr : &it->value();
  };
  auto entry = [&](const char* key) { return where + " [\"" + key + "\"]"; };
  CheckpointContents c;
  const c10::IValue* model = get("model");
  if (!model) throw InvalidArgument(where + ": not a checkpoint: it has no \"model\" entry");
  c.model = state_dict_from_ivalue(*model, entry("model"));
  if (const auto* v = get("optimizer")) c.optimizer = *v;
  for (auto [key, field] : {std::pair{"epoch", &c.epoch}, std::pair{"step", &c.step}}) {
    if (const auto* v = get(key)) {
      if (!v->isInt()) throw InvalidArgument(entry(key) + " is a " + v->tagKind() + ", not an int");
      *field = v->toInt();
    }
  }
  if (const auto* v = get("rng")) {
    if (v->isTensor()) {  // torch.get_rng_state() stored directly
      c.rng = v->toTensor();
    } else {
      const PlainDict rng = string_keyed(*v, entry("rng"));
      auto it = rng.find(c10::IValue("cpu"));
      if (it != rng.end()) {
        if (!it->value().isTensor()) throw InvalidArgument(entry("rng") + "[\"cpu\"] is not a tensor");
        c.rng = it->value().toTensor();
      }
    }
  }
  if (const auto* v = get("sampler")) c.sampler = string_keyed(*v, entry("sampler"));
  if (const auto* v = get("schedule")) c.schedule = string_keyed(*v, entry("schedule"));
  if (const auto* v = get("config")) c.config = string_keyed(*v, entry("config"));
  if (const auto* v = get("extra")) c.extra = string_keyed(*v, entry("extra"));
  return c;
}

}  // namespace ddp::train
