#include "ddp/data/shards.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <regex>

#include "byte_reader.h"
#include "ddp/errors.h"
#include "dist/atomic_file.h"
#include "shard_manifest.h"
#include "tensor_file.h"

namespace ddp::data {
namespace {

namespace fs = std::filesystem;
using detail::Manifest;

[[noreturn]] void bad(const std::string& what) { throw ddp::InvalidArgument(what); }

void check_spec(const char* fn, const ShardSpec& spec) {
  const std::string f = std::string(fn) + ": ";
  if (spec.dir.empty()) bad(f + "ShardSpec.dir is empty; set the directory for the shard files");
  if (spec.name.empty() || spec.name.find('/') != std::string::npos || spec.name[0] == '.')
    bad(f + "ShardSpec.name '" + spec.name + "' must be a non-empty file name prefix without '/' or a leading '.'");
  if (spec.num_shards < 1) bad(f + "ShardSpec.num_shards must be >= 1, got " + std::to_string(spec.num_shards));
}

std::string shape(const at::Tensor& t) {
  std::string s = detail::dtype_name(t.scalar_type()) + "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
  return s + "]";
}

// n, dtypes and shapes, and a CRC-32 over every byte of x and y.
std::string fingerprint(const at::Tensor& x, const at::Tensor& y) {
  return "n=" + std::to_string(x.size(0)) + " x=" + shape(x) + " y=" + shape(y) +
         " crc32=" + detail::hex32(detail::crc32_of(y, detail::crc32_of(x)));
}

std::string shard_tag(const ShardSpec& spec, int64_t rank, const std::string& write_id) {
  return "ddp-shards name=" + spec.name + " shard=" + std::to_string(rank) + "/" + std::to_string(spec.num_shards) +
         " write_id=" + write_id;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : UINT64_MAX;
}

// The first way the manifest differs from spec, or "" when it matches.
std::string mismatch(const Manifest& m, const ShardSpec& spec, bool any_source) {
  if (m.name != spec.name) return "name '" + m.name + "', not '" + spec.name + "'";
  if (m.num_shards != spec.num_shards)
    return "num_shards " + std::to_string(m.num_shards) + ", not " + std::to_string(spec.num_shards);
  if (m.seed != spec.seed) return "seed " + std::to_string(m.seed) + ", not " + std::to_string(spec.seed);
  if (m.source_id != spec.source_id && !(any_source && spec.source_id.empty()))
    return "source_id '" + m.source_id + "', not '" + spec.source_id + "'";
  return "";
}

// The manifest, if it exists, parses, matches spec and its shard files have the recorded sizes.
std::optional<Manifest> current_manifest(const ShardSpec& spec) {
  std::optional<Manifest> m;
  try {
    m = detail::read_manifest(manifest_path(spec));
  } catch (const DataError&) {
    return std::nullopt;  // corrupt: stale, write again
  }
  if (!m || !mismatch(*m, spec, false).empty()) return std::nullopt;
  for (const auto& [name, bytes] : m->files)
    if (file_size(spec.dir + "/" + name) != bytes) return std::nullopt;
  return m;
}

}  // namespace

std::string manifest_path(const ShardSpec& spec) { return spec.dir + "/" + spec.name + ".manifest"; }

std::string shard_path(const ShardSpec& spec, int64_t rank) {
  return spec.dir + "/" + spec.name + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(spec.num_shards) +
         ".bin";
}

void write_shards(const ShardSpec& spec, const at::Tensor& x, const at::Tensor& y) {
  check_spec("write_shards", spec);
  if (!x.defined() || x.dim() < 1) bad("write_shards: x must be a tensor [N, ...]");
  if (!y.defined() || y.dim() != 1 || y.scalar_type() != at::kLong || y.size(0) != x.size(0))
    bad("write_shards: y must be int64 [N] with N = x.size(0) = " + std::to_string(x.size(0)) + ", got " +
        (y.defined() ? shape(y) : std::string("an undefined tensor")));
  const int64_t n = x.size(0), w = spec.num_shards, per = n / w;
  if (per == 0)
    bad("write_shards: " + std::to_string(n) + " samples cannot fill " + std::to_string(w) +
        " shards (ShardSpec.num_shards); every shard would be empty");
  std::error_code ec;
  fs::create_directories(spec.dir, ec);
  if (ec) throw ddp::Error("write_shards: cannot create " + spec.dir + ": " + ec.message());
  // No manifest while the shard files change: an interrupted write reads as missing, not as current.
  if (std::remove(manifest_path(spec).c_str()) != 0 && errno != ENOENT)
    throw ddp::Error("write_shards: cannot remove " + manifest_path(spec) + ": " + std::strerror(errno));

  Manifest m;
  m.name = spec.name;
  m.num_shards = w;
  m.seed = spec.seed;
  m.samples = n;
  m.per_shard = per;
  m.source_id = spec.source_id;
  m.fingerprint = fingerprint(x, y);
  m.write_id = detail::hex32(detail::crc32_of(detail::format_manifest(m)));  // names this write in every file
  auto gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed);
  at::Tensor perm = at::randperm(n, gen, at::kLong);
  at::Tensor grid = perm.narrow(0, 0, per * w).view({per, w});  // column r: perm[r], perm[r + W], ...
  for (int64_t r = 0; r < w; ++r) {
    at::Tensor index = grid.select(1, r).contiguous();
    const std::string path = shard_path(spec, r);
    detail::write_tensor_file(path, shard_tag(spec, r, m.write_id),
                              {x.index_select(0, index), y.index_select(0, index), index});
    m.files.emplace_back(fs::path(path).filename().string(), file_size(path));
  }
  ddp::detail::write_file_atomic(manifest_path(spec), detail::format_manifest(m));
  // Shard files of this name for another world size are stale now: <name>.shard-<r>-of-<W'>.bin.
  static const std::regex kShardFile(R"(shard-[0-9]+-of-([0-9]+)\.bin)");
  const std::string prefix = spec.name + ".";
  for (const auto& entry : fs::directory_iterator(spec.dir, ec)) {
    const std::string f = entry.path().filename().string();
    std::smatch match;
    const std::string rest = f.rfind(prefix, 0) == 0 ? f.substr(prefix.size()) : "";
    if (std::regex_match(rest, match, kShardFile) && match[1].str() != std::to_string(w)) fs::remove(entry.path(), ec);
  }
}

bool shards_up_to_date(const ShardSpec& spec, const at::Tensor& x, const at::Tensor& y) {
  check_spec("shards_up_to_date", spec);
  auto m = current_manifest(spec);
  return m && x.defined() && y.defined() && x.dim() >= 1 && m->fingerprint == fingerprint(x, y);
}

Shard load_shard(const ShardSpec& spec, int64_t rank) {
  check_spec("load_shard", spec);
  if (rank < 0 || rank >= spec.num_shards)
    bad("load_shard: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(spec.num_shards) + ")");
  const std::string mpath = manifest_path(spec);
  auto m = detail::read_manifest(mpath);
  if (!m)
    throw DataError(mpath + ": missing: no shards named '" + spec.name + "' in " + spec.dir +
                    "; write them first with write_shards or prepare_shards");
  if (std::string why = mismatch(*m, spec, true); !why.empty())
    throw DataError(mpath + ": the shards were written with " + why + "; write them again for this spec");
  const std::string path = shard_path(spec, rank);
  detail::TensorFile f = detail::read_tensor_file(path);
  const std::string tag = shard_tag(spec, rank, m->write_id);
  if (f.tag != tag)
    throw DataError(path + ": holds '" + f.tag + "' but the manifest expects '" + tag +
                    "': files of different writes are mixed; write the shards again");
  auto ok = [&](size_t i, int64_t dim) {
    return f.tensors.size() == 3 && f.tensors[i].dim() >= dim && f.tensors[i].size(0) == m->per_shard &&
           (i == 0 || (f.tensors[i].dim() == 1 && f.tensors[i].scalar_type() == at::kLong));
  };
  if (!ok(0, 1) || !ok(1, 1) || !ok(2, 1))
    throw DataError(path + ": expected 3 tensors (x [" + std::to_string(m->per_shard) + ", ...], y and index int64 [" +
                    std::to_string(m->per_shard) + "]) as the manifest says; write the shards again");
  return {f.tensors[0], f.tensors[1], f.tensors[2]};
}

Shard prepare_shards(ProcessGroup& group, const ShardSpec& spec,
                     const std::function<std::pair<at::Tensor, at::Tensor>()>& make_source) {
  check_spec("prepare_shards", spec);
  if (spec.num_shards != group.size())
    bad("prepare_shards: ShardSpec.num_shards (" + std::to_string(spec.num_shards) + ") must equal the group size (" +
        std::to_string(group.size()) + ")");
  std::exception_ptr failure;
  std::string message;
  if (group.rank() == 0) {
    try {
      if (spec.source_id.empty() || !current_manifest(spec)) {
        auto [x, y] = make_source();
        if (!spec.source_id.empty() || !shards_up_to_date(spec, x, y)) write_shards(spec, x, y);
      }
    } catch (const std::exception& e) {
      failure = std::current_exception();
      message = e.what();
      if (message.empty()) message = "unknown error";
    }
  }
  // Rank 0's outcome to every rank. This is the barrier: no rank passes it before rank 0 has finished writing.
  at::Tensor status = at::full({1}, static_cast<int64_t>(message.size()), at::kLong);
  group.broadcast(status).wait();
  if (const int64_t len = status.item<int64_t>(); len > 0) {
    at::Tensor text = at::empty({len}, at::kByte);
    if (group.rank() == 0) std::memcpy(text.data_ptr(), message.data(), len);
    group.broadcast(text).wait();
    if (failure) std::rethrow_exception(failure);
    // A PeerFailure: ddprun's summary then names rank 0 (its own error) as the cause, not this rank.
    throw ddp::PeerFailed<ddp::Error>("prepare_shards: rank 0 could not write the shards: " +
                                          std::string(static_cast<const char*>(text.data_ptr()), len),
                                      0);
  }
  return load_shard(spec, group.rank());
}

std::string file_source_id(const std::vector<std::string>& paths) {
  std::string id;
  for (const auto& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw DataError(path + ": cannot stat for file_source_id: " + std::strerror(errno));
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (!id.empty()) id += "; ";
    id += path + " size=" + std::to_string(st.st_size) + " mtime_ns=" + std::to_string(mtime_ns);
  }
  return id;
}

}  // namespace ddp::data
