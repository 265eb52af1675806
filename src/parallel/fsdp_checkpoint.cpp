// Sharded checkpoints of FullyShardedDataParallel: each rank writes the shards
// it holds (and its optimizer's state of them) to its own file; loading at any
// world size reads, for each of its new shards, the old files that overlap it.
//
// File dir/shard-<rank>-of-<world>.pt (torch::pickle_save: Python's torch.load reads it):
//   {"format": "ddp-fsdp-shards/1", "world_size": W, "rank": r,
//    "units": [{"names": [...], "shapes": [[...]], "numel": N, "shard": Tensor[S]}, ...],
//    "buffers": {name: Tensor}, "optimizer": <optimizer_state_dict of the shards> (optional)}
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/optimizer_state.h"
#include "dist/atomic_file.h"
#include "dist/error_context.h"
#include "parallel/sharded_unit.h"

namespace ddp {
namespace {

using GenericDict = c10::impl::GenericDict;
constexpr const char* kFormat = "ddp-fsdp-shards/1";

std::string shard_file(const std::string& dir, int rank, int world) {
  return dir + "/shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".pt";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const c10::IValue& field(const GenericDict& d, const char* key, const std::string& file) {
  auto it = d.find(c10::IValue(std::string(key)));
  if (it == d.end()) throw InvalidArgument("FullyShardedDataParallel: " + file + " has no \"" + key + "\"");
  return it->value();
}

c10::IValue read_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InvalidArgument("FullyShardedDataParallel: cannot read " + file + " (" + std::strerror(errno) + ")");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    c10::IValue v = torch::jit::pickle_load(bytes);
    if (!v.isGenericDict() || field(v.toGenericDict(), "format", file).toStringRef() != kFormat)
      throw InvalidArgument("not a " + std::string(kFormat) + " file");
    return v;
  } catch (const std::exception& e) {
    throw InvalidArgument("FullyShardedDataParallel: " + file +
                          " is not a readable shard file: " + std::string(e.what()).substr(0, 300));
  }
}

// The elements [start, start + n) of a unit's flat tensor, from old shards of size old_s.
struct Pieces {
  int64_t old_shard = 0;
  std::function<at::Tensor(int)> shard_of;  // old rank -> its 1-D tensor for this unit
};

at::Tensor reshard(const Pieces& p, int64_t start, int64_t n, int64_t new_s, const at::Tensor& like) {
  at::Tensor out = at::zeros({new_s}, like.options());
  for (int64_t pos = start; pos < start + n;) {
    const int k = int(pos / p.old_shard);
    const int64_t within = pos - k * p.old_shard, take = std::min(p.old_shard - within, start + n - pos);
    out.narrow(0, pos - start, take).copy_(p.shard_of(k).narrow(0, within, take));
    pos += take;
  }
  return out;
}

}  // namespace

void FullyShardedDataParallel::save_sharded(const std::string& dir, const torch::optim::Optimizer* optimizer) {
  const int r = group_->rank(), w = group_->size();
  ErrorContext ctx{group_->backend(), r, w, "FullyShardedDataParallel save_sharded"};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  c10::impl::GenericList units(c10::AnyType::get());
  for (const auto& unit : units_) {
    GenericDict u(c10::StringType::get(), c10::AnyType::get());
    c10::List<std::string> names(unit->names());
    c10::impl::GenericList shapes(c10::AnyType::get());
    for (size_t i = 0; i < unit->names().size(); ++i) shapes.push_back(c10::List<int64_t>(unit->shape(i)));
    u.insert("names", names);
    u.insert("shapes", shapes);
    u.insert("numel", unit->numel());
    u.insert("shard", unit->shard().detach());
    units.push_back(u);
  }
  GenericDict buffers(c10::StringType::get(), c10::AnyType::get());
  for (const auto& b : module_->named_buffers()) buffers.insert(b.key(), b.value().detach());
  GenericDict top(c10::StringType::get(), c10::AnyType::get());
  top.insert("format", std::string(kFormat));
  top.insert("world_size", int64_t(w));
  top.insert("rank", int64_t(r));
  top.insert("units", units);
  top.insert("buffers", buffers);
  if (optimizer) top.insert("optimizer", optimizer_state_dict(*optimizer));
  const std::vector<char> bytes = torch::jit::pickle_save(top);
  try {  // whole or not at all
    ddp::detail::write_file_atomic(shard_file(dir, r, w), bytes.data(), bytes.size());
  } catch (const Error& e) {
    throw Error(ctx.prefix() + e.what());
  }
  barrier({}, group_);  // every rank's file is complete
}

void FullyShardedDataParallel::load_sharded(const std::string& dir, torch::optim::Optimizer* optimizer) {
  const int r = group_->rank(), w = group_->size();
  ErrorContext ctx{group_->backend(), r, w, "FullyShardedDataParallel load_sharded"};
  // The saved world size: from the file names (shard-0-of-W.pt).
  int saved_world = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = entry.path().filename().string();
    int world = 0;
    char tail = 0;
    if (std::sscanf(f.c_str(), "shard-0-of-%d.p%c", &world, &tail) == 2 && tail == 't' &&
        f == "shard-0-of-" + std::to_string(world) + ".pt") {
      if (saved_world && saved_world != world)
        throw_invalid(ctx, dir + " holds shards of two world sizes (" + std::to_string(saved_world) + " and " +
                               std::to_string(world) + "); keep one checkpoint per directory");
      saved_world = world;
    }
  }
  if (!saved_world) throw_invalid(ctx, "no shard-0-of-<world>.pt in " + dir + "; was it written by save_sharded?");
  std::map<int, c10::IValue> files;  // read on demand: only the ones overlapping this rank's shards
  auto file = [&](int k) -> const GenericDict {
    auto it = files.find(k);
    if (it == files.end()) {
      const std::string name = shard_file(dir, k, saved_world);
      c10::IValue v = read_file(name);
      if (field(v.toGenericDict(), "units", name).toList().size() != units_.size())
        throw_invalid(ctx, name + " holds " + std::to_string(field(v.toGenericDict(), "units", name).toList().size()) +
                               " units, the model " + std::to_string(units_.size()));
      it = files.emplace(k, v).first;
    }
    return it->second.toGenericDict();
  };
  auto unit_of = [&](int k, size_t u) {
    return field(file(k), "units", shard_file(dir, k, saved_world)).toList().get(u).toGenericDict();
  };
  const bool with_optimizer = optimizer != nullptr;
  GenericDict opt_state(c10::IntType::get(), c10::AnyType::get());
  for (size_t u = 0; u < units_.size(); ++u) {
    detail::ShardedUnit& unit = *units_[u];
    const std::string name0 = shard_file(dir, 0, saved_world);
    GenericDict saved = unit_of(0, u);
    const auto names = field(saved, "names", name0).toList();
    const auto shapes = field(saved, "shapes", name0).toList();
    for (size_t i = 0; i < unit.names().size(); ++i) {
      const bool same = i < names.size() && names.get(i).toStringRef() == unit.names()[i] &&
                        shapes.get(i).toIntVector() == unit.shape(i);
      if (!same || names.size() != unit.names().size())
        throw_invalid(ctx, name0 + ": unit " + std::to_string(u) + " differs from the model's at parameter '" +
                               unit.names()[i] + "' " + c10::str(at::IntArrayRef(unit.shape(i))) +
                               "; the checkpoint was saved from another model or wrap policy");
    }
    const int64_t n = unit.numel(), new_s = ceil_div(n, w), start = std::min(n, int64_t(r) * new_s);
    const int64_t mine = std::min(new_s, n - start);
    Pieces p{ceil_div(n, saved_world), [&](int k) { return field(unit_of(k, u), "shard", "").toTensor(); }};
    unit.load_shard(reshard(p, start, mine, new_s, unit.shard()));
    if (!with_optimizer) continue;
    // This unit's optimizer state: 1-D tensors of the old shard size are resharded, the rest (step) copied.
    auto state_of = [&](int k) -> GenericDict {
      const std::string name = shard_file(dir, k, saved_world);
      auto opt = file(k).find(c10::IValue(std::string("optimizer")));
      if (opt == file(k).end()) throw_invalid(ctx, name + " holds no optimizer state");
      auto st = field(opt->value().toGenericDict(), "state", name).toGenericDict();
      auto it = st.find(c10::IValue(int64_t(u)));
      return it == st.end() ? GenericDict(c10::StringType::get(), c10::AnyType::get()) : it->value().toGenericDict();
    };
    GenericDict first = state_of(0), resharded(c10::StringType::get(), c10::AnyType::get());
    for (const auto& item : first) {
      const c10::IValue& v = item.value();
      if (v.isTensor() && v.toTensor().dim() == 1 && v.toTensor().numel() == p.old_shard) {
        const std::string key = item.key().toStringRef();
        Pieces q{p.old_shard, [&](int k) { return state_of(k).at(key).toTensor(); }};
        resharded.insert(key, reshard(q, start, mine, new_s, v.toTensor()));
      } else {
        resharded.insert(item.key(), v);
      }
    }
    if (!first.empty()) opt_state.insert(int64_t(u), resharded);
  }
  at::NoGradGuard no_grad;
  GenericDict buffers = field(file(0), "buffers", shard_file(dir, 0, saved_world)).toGenericDict();
  for (const auto& b : module_->named_buffers()) {
    auto it = buffers.find(c10::IValue(b.key()));
    if (it == buffers.end()) throw_invalid(ctx, shard_file(dir, 0, saved_world) + " has no buffer '" + b.key() + "'");
    b.value().copy_(it->value().toTensor());
  }
  if (with_optimizer) {
    const std::string name0 = shard_file(dir, 0, saved_world);
    auto opt = file(0).find(c10::IValue(std::string("optimizer")));
    if (opt == file(0).end()) throw_invalid(ctx, name0 + " holds no optimizer state");
    GenericDict top(c10::StringType::get(), c10::AnyType::get());
    top.insert("state", opt_state);
    top.insert("param_groups", field(opt->value().toGenericDict(), "param_groups", name0));
    load_optimizer_state_dict(*optimizer, top);
  }
}

}  // namespace ddp
