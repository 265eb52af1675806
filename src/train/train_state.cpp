#include "train_state.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <optional>

#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/state_dict.h"
#include "random_streams.h"

namespace ddp::train::detail {
namespace {

c10::IValue get(const c10::impl::GenericDict& d, const std::string& key, const std::string& path) {
  auto it = d.find(key);
  if (it == d.end())
    throw InvalidArgument("checkpoint " + path + " has no '" + key +
                          "' entry: it was not written by ddp-train (a plain state dict cannot resume training)");
  return it->value();
}

// Settings of this run that differ from those the checkpoint was written with, as a warning.
void warn_changed_settings(const c10::impl::GenericDict& saved, const TrainConfig& cfg, const std::string& path,
                           const Console& console) {
  std::string changes;
  for (const auto& [key, now] : describe(cfg)) {
    auto it = saved.find(key);
    if (it == saved.end() || !it->value().isString() || it->value().toStringRef() == now) continue;
    changes += "\n  " + key + ": " + it->value().toStringRef() + " -> " + now;
  }
  if (!changes.empty())
    console.warning("resuming " + path + " with settings that differ from the checkpoint's:" + changes);
}

}  // namespace

std::vector<at::Tensor> gather_rng_states(ProcessGroup& group, const at::Device& device) {
  at::Tensor mine = get_rng_state(device).contiguous();
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty_like(mine));
  group.all_gather(all, mine).wait();
  return all;
}

at::Tensor gather_loss_sums(const LoopState& s, ProcessGroup& group) {
  at::Tensor mine = at::tensor({s.loss_sum, double(s.loss_count)}, at::kDouble);
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty_like(mine));
  group.all_gather(all, mine).wait();
  return at::stack(all);
}

c10::IValue make_checkpoint(const TrainConfig& cfg, const LoopState& s, const torch::nn::Module& model,
                            const c10::IValue& optimizer, const torch::nn::Module* ema,
                            const std::vector<at::Tensor>& rng_states, const at::Tensor& loss_sums, int world,
                            int64_t total_steps) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("model", state_dict_to_ivalue(state_dict(model)));
  d.insert("optimizer", optimizer);
  if (ema) d.insert("ema", state_dict_to_ivalue(state_dict(*ema)));
  d.insert("epoch", s.epoch);
  d.insert("micro", s.micro);
  d.insert("step", s.step);
  d.insert("world_size", int64_t{world});
  c10::List<at::Tensor> rng;
  for (const auto& t : rng_states) rng.push_back(t);
  d.insert("rng", rng);
  d.insert("train_loss_sums", loss_sums);  // [rank] = (sum, count) of the epoch in progress
  c10::Dict<std::string, int64_t> sampler;
  sampler.insert("seed", static_cast<int64_t>(cfg.seed));
  sampler.insert("epoch", s.epoch);
  sampler.insert("position", s.micro * *cfg.batch_size);
  d.insert("sampler", sampler);
  c10::impl::GenericDict schedule(c10::StringType::get(), c10::AnyType::get());
  schedule.insert("spec", cfg.schedule);
  schedule.insert("base_lr", *cfg.lr);
  schedule.insert("total_steps", total_steps);
  d.insert("schedule", schedule);
  c10::Dict<std::string, std::string> config;
  for (const auto& [k, v] : describe(cfg)) config.insert(k, v);
  d.insert("config", config);
  return d;
}

LoopState restore_checkpoint(const c10::IValue& ckpt, const std::string& path, const TrainConfig& cfg,
                             const ProcessGroup& group, torch::nn::Module& model, Strategy& strategy,
                             torch::nn::Module* ema, const Console& console) {
  if (!ckpt.isGenericDict()) throw InvalidArgument("checkpoint " + path + " is not a dict");
  auto d = ckpt.toGenericDict();
  auto config = get(d, "config", path).toGenericDict();
  auto recipe = config.find("recipe");
  if (recipe == config.end() || recipe->value().toStringRef() != cfg.recipe)
    throw InvalidArgument("checkpoint " + path + " was written by recipe '" +
                          (recipe == config.end() ? std::string("?") : recipe->value().toStringRef()) + "', not '" +
                          cfg.recipe + "'; use another --out-dir or the same recipe");
  load_state_dict(model, state_dict_from_ivalue(get(d, "model", path), path + " [model]"));
  strategy.load_optimizer_state(get(d, "optimizer", path));
  if (ema) {
    auto it = d.find("ema");
    load_state_dict(*ema, it != d.end() ? state_dict_from_ivalue(it->value(), path + " [ema]") : state_dict(model));
  }
  const int64_t world = get(d, "world_size", path).toInt();
  c10::IValue rng = get(d, "rng", path);  // a list with one generator state per rank
  if (!rng.isList()) throw InvalidArgument("checkpoint " + path + ": 'rng' is not a list of per-rank generator states");
  if (world == group.size() && static_cast<int64_t>(rng.toListRef().size()) == world) {
    set_rng_state(rng.toListRef()[group.rank()].toTensor());
  } else {  // another world: each rank's generator afresh, as after an in-place change of world (inplace.cpp)
    at::manual_seed(stream_seed(cfg.seed, Stream::kDropout, group.rank(), get(d, "step", path).toInt()));
    const bool kept = d.find("launch_world") != d.end() &&
                      launch_env::choice(launch_env::kRecovery) == std::optional<std::string>("inplace");
    console.warning("checkpoint " + path + " was written by " + std::to_string(world) + " ranks, this run has " +
                    std::to_string(group.size()) + ": training continues, but " +
                    (kept ? "each rank's generator starts afresh from (seed, rank, step), as after an in-place "
                            "change of world; the global batch and the data order are the launch world's, kept"
                          : "data order and random draws differ from an uninterrupted run"));
  }
  LoopState s;
  s.epoch = get(d, "epoch", path).toInt();
  s.micro = get(d, "micro", path).toInt();
  s.step = get(d, "step", path).toInt();
  auto sums = d.find("train_loss_sums");
  if (s.micro > 0 && world == group.size() && sums != d.end() && sums->value().isTensor() &&
      sums->value().toTensor().sizes() == at::IntArrayRef{world, 2}) {
    at::Tensor mine = sums->value().toTensor()[group.rank()];
    s.loss_sum = mine[0].item<double>();
    s.loss_count = static_cast<int64_t>(mine[1].item<double>());
  }
  warn_changed_settings(config, cfg, path, console);
  return s;
}

void add_comm_hook_state(c10::IValue& ckpt, const std::string& spec, const std::vector<c10::IValue>& states) {
  if (states.empty() || states[0].isNone()) return;
  c10::impl::GenericList ranks(c10::AnyType::get());
  for (const auto& st : states) ranks.push_back(st);
  c10::impl::GenericDict hook(c10::StringType::get(), c10::AnyType::get());
  hook.insert("spec", spec);
  hook.insert("ranks", ranks);
  ckpt.toGenericDict().insert("comm_hook", hook);
}

void restore_comm_hook(const c10::IValue& ckpt, const std::string& path, const TrainConfig& cfg,
                       const ProcessGroup& group, CommHook& hook, const Console& console) {
  if (hook.state_dict().isNone()) return;  // nothing to restore
  auto d = ckpt.toGenericDict();
  auto it = d.find("comm_hook");
  std::string why;
  if (it == d.end()) {
    why = "has no comm hook state";
  } else {
    auto h = it->value().toGenericDict();
    const std::string spec = h.at("spec").toStringRef();
    const auto& ranks = h.at("ranks").toListRef();
    if (spec != cfg.comm_hook)
      why = "holds the state of comm hook '" + spec + "'";
    else if (static_cast<int>(ranks.size()) != group.size())
      why = "was written by " + std::to_string(ranks.size()) + " ranks, this run has " + std::to_string(group.size());
    else {
      try {
        hook.load_state_dict(ranks[group.rank()]);
      } catch (const std::exception& e) {
        throw InvalidArgument("checkpoint " + path + ": comm hook state of rank " + std::to_string(group.rank()) +
                              ": " + e.what());
      }
      return;
    }
  }
  console.warning("checkpoint " + path + " " + why + ": comm hook '" + cfg.comm_hook + "' starts afresh");
}

void add_bucket_order(c10::IValue& ckpt, const std::vector<int64_t>& order) {
  if (order.empty()) return;
  ckpt.toGenericDict().insert("ddp_bucket_order", c10::List<int64_t>(order));
}

void add_device_rng(c10::IValue& ckpt, const at::Device& device, const std::vector<at::Tensor>& states) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("device", device.str());
  d.insert("states", c10::List<at::Tensor>(states));
  ckpt.toGenericDict().insert("device_rng", d);
}

void restore_device_rng(const c10::IValue& ckpt, const std::string& path, const ProcessGroup& group,
                        const at::Device& device) {
  auto d = ckpt.toGenericDict();
  auto it = d.find("device_rng");
  if (it == d.end()) return;  // written before it was kept
  const std::string where = "checkpoint " + path + ": 'device_rng'";
  if (!it->value().isGenericDict()) throw InvalidArgument(where + " is not a dict");
  auto rng = it->value().toGenericDict();
  auto saved = rng.find("device"), states = rng.find("states");
  if (saved == rng.end() || !saved->value().isString() || states == rng.end() || !states->value().isList())
    throw InvalidArgument(where + " needs 'device' (a string) and 'states' (one per rank)");
  std::optional<at::Device> trained_on;
  try {
    trained_on = at::Device(saved->value().toStringRef());
  } catch (const c10::Error&) {
    throw InvalidArgument(where + ": '" + saved->value().toStringRef() + "' is not a device");
  }
  if (trained_on->type() != device.type()) return;  // trained on another kind of device
  const auto& list = states->value().toListRef();
  if (static_cast<int>(list.size()) != group.size()) return;  // another world: as seeded, as the CPU's
  if (!list[group.rank()].isTensor())
    throw InvalidArgument(where + ": rank " + std::to_string(group.rank()) +
                          "'s "
                          "state is not a tensor");
  set_rng_state(device, list[group.rank()].toTensor());
}

void add_launch_world(c10::IValue& ckpt, int launch_world) {
  if (launch_world > 0) ckpt.toGenericDict().insert("launch_world", int64_t{launch_world});
}

int launch_world_of(const c10::IValue& ckpt, const std::string& path) {
  auto d = ckpt.toGenericDict();
  auto it = d.find("launch_world");
  if (it == d.end()) return 0;
  if (!it->value().isInt() || it->value().toInt() < 1)
    throw InvalidArgument("checkpoint " + path + ": 'launch_world' is not a positive integer");
  return static_cast<int>(it->value().toInt());
}

void restore_bucket_order(const c10::IValue& ckpt, const std::string& path, Strategy& strategy,
                          const Console& console) {
  auto d = ckpt.toGenericDict();
  auto it = d.find("ddp_bucket_order");
  if (it == d.end()) return;  // the rebuild after the first step, as in a new run
  std::vector<int64_t> order;
  if (it->value().isList())  // a generic list as read back (ddp's reader, Python's torch.save)
    for (const auto& k : it->value().toListRef()) order.push_back(k.isInt() ? k.toInt() : -1);
  try {
    strategy.load_bucket_order(order);
  } catch (const InvalidArgument& e) {
    console.warning(
        "checkpoint " + path + ": its ddp_bucket_order does not fit this model (" + e.what() +
        "); the buckets are rebuilt after the first step, so the resumed gradients may differ in the last bit");
  }
}

}  // namespace ddp::train::detail
