// Sharded checkpoints of a sharded model: each rank writes its rows of every parameter, with the full shape
// and the rows' offset, and its optimizer's state of them, to its own file; loading at any world size (and any
// units: parameters go by name) reads, for each of its new rows, the files holding them.
//
// File dir/shard-<rank>-of-<world>.pt (torch::pickle_save: Python's torch.load reads it):
//   {"format": "ddp-fsdp-shards/2", "world_size": W, "rank": r,
//    "params": {name: {"shape": [...], "row_offset": o, "shard": Tensor[n, ...]}},
//    "buffers": {name: Tensor},
//    "optimizer": {"state": {name: {"exp_avg": Tensor[n, ...], "step": ...}}, "param_groups": [{..., "params": [name,
//    ...]}]}}
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_shard.h"
#include "ddp/parallel/optimizer_state.h"
#include "dist/atomic_file.h"
#include "dist/ivalue_tensors.h"
#include "parallel/fsdp_optimizer.h"

namespace ddp {
namespace {

using GenericDict = c10::impl::GenericDict;
constexpr const char* kFormat = "ddp-fsdp-shards/2";

std::string shard_file(const std::string& dir, int rank, int world) {
  return dir + "/shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".pt";
}

GenericDict new_dict() { return GenericDict(c10::StringType::get(), c10::AnyType::get()); }

const c10::IValue& field(const GenericDict& d, const std::string& key, const std::string& where,
                         const ErrorContext& ctx) {
  auto it = d.find(c10::IValue(key));
  if (it == d.end()) throw_invalid(ctx, where + " has no \"" + key + "\"");
  return it->value();
}

c10::IValue read_file(const std::string& file, const ErrorContext& ctx) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_invalid(ctx, "cannot read " + file + " (" + std::strerror(errno) + ")");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string format;
  try {
    c10::IValue v = torch::jit::pickle_load(bytes);
    if (v.isGenericDict()) {
      auto f = v.toGenericDict().find(c10::IValue(std::string("format")));
      if (f != v.toGenericDict().end() && f->value().isString()) format = f->value().toStringRef();
    }
    if (format == kFormat) return v;
  } catch (const std::exception& e) {
    throw_invalid(ctx, file + " is not a readable shard file: " + std::string(e.what()).substr(0, 300));
  }
  throw_invalid(ctx, file + " is not a " + kFormat + " file" + (format.empty() ? std::string() : " but " + format) +
                         (format == "ddp-fsdp-shards/1" ? " (flat units of an earlier ddp: load it with that version "
                                                          "and save a full state dict)"
                                                        : ""));
}

// Rows [start, start + n) of a tensor saved in shards of `old_chunk` rows each: piece(k) is file k's.
at::Tensor rows_from(int64_t start, int64_t n, int64_t old_chunk, const std::function<at::Tensor(int)>& piece,
                     const std::vector<int64_t>& shape) {
  at::Tensor out = at::empty(shape, piece(int(start / std::max<int64_t>(old_chunk, 1))).options());
  at::Tensor flat = out.view({n, -1});
  for (int64_t pos = start; pos < start + n;) {
    const int k = int(pos / old_chunk);
    const int64_t within = pos - k * old_chunk, take = std::min(old_chunk - within, start + n - pos);
    at::Tensor src = piece(k);
    flat.narrow(0, pos - start, take).copy_(src.reshape({src.size(0), -1}).narrow(0, within, take));
    pos += take;
  }
  return out;
}

}  // namespace

void ShardedModel::save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer) {
  const ProcessGroup& g = state_->group();
  const int r = g.rank(), w = g.size();
  ErrorContext ctx{g.backend(), r, w, "save_sharded"};
  GenericDict params = new_dict();
  for (const auto& unit : state_->units())
    for (const auto& p : unit->params()) {
      GenericDict e = new_dict();
      e.insert("shape", c10::List<int64_t>(p.shape));
      e.insert("row_offset", std::min(p.rows, r * p.chunk));
      e.insert("shard", p.shard.detach());
      params.insert(p.names[0], e);
    }
  GenericDict buffers = new_dict();
  for (const auto& b : root_->named_buffers()) buffers.insert(b.key(), b.value().detach());
  GenericDict top = new_dict();
  top.insert("format", std::string(kFormat));
  top.insert("world_size", int64_t(w));
  top.insert("rank", int64_t(r));
  top.insert("params", params);
  top.insert("buffers", buffers);
  if (optimizer) {  // by name: another run's optimizer may number its parameters otherwise
    const auto of = detail::optimizer_params(*state_, *optimizer, ctx);
    const GenericDict sd = optimizer_state_dict(*optimizer).toGenericDict();
    GenericDict state = new_dict();
    for (const auto& item : field(sd, "state", "the optimizer state", ctx).toGenericDict())
      state.insert(of.at(size_t(item.key().toInt()))->names[0], item.value());
    c10::impl::GenericList groups(c10::AnyType::get());
    for (const c10::IValue& group : field(sd, "param_groups", "the optimizer state", ctx).toList()) {
      GenericDict named = group.toGenericDict().copy();
      c10::List<std::string> names;
      for (const c10::IValue& id : field(named, "params", "a param group", ctx).toList())
        names.push_back(of.at(size_t(id.toInt()))->names[0]);
      named.insert_or_assign("params", names);
      groups.push_back(named);
    }
    GenericDict opt = new_dict();
    opt.insert("state", state);
    opt.insert("param_groups", groups);
    top.insert("optimizer", opt);
  }
  const GroupPtr& replicate = state_->replicate_group();
  if (!replicate || replicate->rank() == 0) {  // HSDP: replica 0 writes (the others hold the same rows)
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    // On the CPU: a file of GPU tensors would load every rank's reads onto the writer's device index.
    const std::vector<char> bytes = torch::jit::pickle_save(
        ddp::detail::map_tensors(top, [](const at::Tensor& t) { return t.is_cpu() ? t : t.cpu(); }));
    try {  // whole or not at all
      ddp::detail::write_file_atomic(shard_file(dir, r, w), bytes.data(), bytes.size());
    } catch (const Error& e) {
      throw Error(ctx.prefix() + e.what());
    }
  }
  barrier({}, state_->group_ptr());  // every rank's file is complete
  if (replicate) barrier({}, replicate);
}

void ShardedModel::load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer) {
  const ProcessGroup& g = state_->group();
  const int r = g.rank(), w = g.size();
  ErrorContext ctx{g.backend(), r, w, "load_sharded"};
  // The saved world size: from the file names (shard-0-of-W.pt).
  int saved = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    int world = 0;
    if (std::sscanf(f.c_str(), "shard-0-of-%d.pt", &world) == 1 && f == "shard-0-of-" + std::to_string(world) + ".pt") {
      if (saved && saved != world)
        throw_invalid(ctx, dir + " holds shards of two world sizes (" + std::to_string(saved) + " and " +
                               std::to_string(world) + "); keep one checkpoint per directory");
      saved = world;
    }
  }
  if (!saved) throw_invalid(ctx, "no shard-0-of-<world>.pt in " + dir + "; was it written by save_sharded?");
  std::map<int, c10::IValue> files;  // read on demand: only the ones holding this rank's rows
  auto file = [&](int k) -> GenericDict {
    auto it = files.find(k);
    if (it == files.end()) it = files.emplace(k, read_file(shard_file(dir, k, saved), ctx)).first;
    return it->second.toGenericDict();
  };
  auto saved_param = [&](int k, const detail::ShardedParam& p) {
    const std::string name = shard_file(dir, k, saved);
    const GenericDict params = field(file(k), "params", name, ctx).toGenericDict();
    auto it = params.find(c10::IValue(p.names[0]));
    if (it == params.end())
      throw_invalid(ctx, name + " has no parameter '" + p.names[0] + "'; it was saved from another model");
    const GenericDict e = it->value().toGenericDict();
    const std::vector<int64_t> shape = field(e, "shape", name, ctx).toIntVector();
    if (shape != p.shape)
      throw_invalid(ctx, name + ": '" + p.names[0] + "' has shape " + c10::str(at::IntArrayRef(shape)) + " there but " +
                             c10::str(at::IntArrayRef(p.shape)) + " in the model");
    return e;
  };
  // The same parameters as the model's, checked on every rank in file 0 (whatever rows it holds).
  size_t count = 0;
  for (const auto& unit : state_->units())
    for (const auto& p : unit->params()) {
      saved_param(0, p);
      ++count;
    }
  const auto in_file = field(file(0), "params", shard_file(dir, 0, saved), ctx).toGenericDict().size();
  if (in_file != count)
    throw_invalid(ctx, shard_file(dir, 0, saved) + " holds " + std::to_string(in_file) + " parameters, the model " +
                           std::to_string(count) + "; it was saved from another model");
  auto saved_state = [&](int k, const std::string& param) {
    const std::string name = shard_file(dir, k, saved);
    const GenericDict opt = field(file(k), "optimizer", name, ctx).toGenericDict();
    const GenericDict st = field(opt, "state", name, ctx).toGenericDict();
    auto it = st.find(c10::IValue(param));
    return it == st.end() ? new_dict() : it->value().toGenericDict();
  };
  // The optimizer's state in its own numbering, as load_optimizer_state_dict takes it.
  std::vector<const detail::ShardedParam*> of;
  if (optimizer) of = detail::optimizer_params(*state_, *optimizer, ctx);
  std::map<std::string, int64_t> id;
  for (size_t i = 0; i < of.size(); ++i) id.emplace(of[i]->names[0], int64_t(i));
  GenericDict opt_state(c10::IntType::get(), c10::AnyType::get());
  for (const auto& unit : state_->units())
    for (size_t i = 0; i < unit->params().size(); ++i) {
      const detail::ShardedParam& p = unit->params()[i];
      const int64_t old_chunk = (p.rows + saved - 1) / saved, start = std::min(p.rows, r * p.chunk);
      std::vector<int64_t> shape = p.shard.sizes().vec();
      if (p.local_rows > 0) {
        at::Tensor rows = rows_from(
            start, p.local_rows, old_chunk,
            [&](int k) { return field(saved_param(k, p), "shard", "", ctx).toTensor(); }, shape);
        unit->load_rows(i, rows);
      }
      auto it = id.find(p.names[0]);
      if (it == id.end()) continue;
      GenericDict first = saved_state(0, p.names[0]), mine = new_dict();
      for (const auto& kv : first) {
        const std::string key = kv.key().toStringRef();
        if (!detail::per_element(key, kv.value())) {
          mine.insert(key, kv.value());
        } else if (p.local_rows == 0) {
          mine.insert(key, at::empty(shape, kv.value().toTensor().options()));
        } else {
          mine.insert(key,
                      rows_from(
                          start, p.local_rows, old_chunk,
                          [&](int k) { return field(saved_state(k, p.names[0]), key, "", ctx).toTensor(); }, shape));
        }
      }
      if (!first.empty()) opt_state.insert(it->second, mine);
    }
  at::NoGradGuard no_grad;
  const GenericDict buffers = field(file(0), "buffers", shard_file(dir, 0, saved), ctx).toGenericDict();
  for (const auto& b : root_->named_buffers()) {
    auto it = buffers.find(c10::IValue(b.key()));
    if (it == buffers.end()) throw_invalid(ctx, shard_file(dir, 0, saved) + " has no buffer '" + b.key() + "'");
    b.value().copy_(it->value().toTensor());
  }
  if (!optimizer) return;
  const std::string name0 = shard_file(dir, 0, saved);
  c10::impl::GenericList groups(c10::AnyType::get());
  for (const c10::IValue& group :
       field(field(file(0), "optimizer", name0, ctx).toGenericDict(), "param_groups", name0, ctx).toList()) {
    GenericDict numbered = group.toGenericDict().copy();
    c10::List<int64_t> ids;
    for (const c10::IValue& n : field(numbered, "params", name0, ctx).toList()) {
      auto it = id.find(n.toStringRef());
      if (it == id.end())
        throw_invalid(ctx, name0 + "'s optimizer steps '" + n.toStringRef() + "', which this optimizer does not");
      ids.push_back(it->second);
    }
    numbered.insert_or_assign("params", ids);
    groups.push_back(numbered);
  }
  GenericDict top = new_dict();
  top.insert("state", opt_state);
  top.insert("param_groups", groups);
  load_optimizer_state_dict(*optimizer, top);
}

}  // namespace ddp
