// Per-rank shard files: preprocess a data set once and save each rank's slice
// in its own file, so that every process loads only its own part.
//
//   ddp::data::ShardSpec spec;
//   spec.dir = "/tmp/shards";
//   spec.name = "fashion-mnist-train";
//   spec.num_shards = group->size();
//   spec.source_id = ddp::data::file_source_id({images_path, labels_path}) + " mean=0.286 std=0.353";
//   ddp::data::Shard mine = ddp::data::prepare_shards(*group, spec, [&] {
//     auto ds = ddp::data::load_mnist_format(dir, true);          // only on rank 0, only when stale
//     return std::make_pair(ddp::data::normalize(ds.images, {0.286}, {0.353}), ds.labels);
//   });
//   // mine.x, mine.y: this rank's floor(N / W) samples
//
// Layout: a seeded permutation perm of [0, N) mixes the samples; shard r holds
// perm[r], perm[r + W], perm[r + 2W], ... with exactly floor(N / W) samples
// each. The N % W samples left over are dropped (like drop_last). Files in dir:
// <name>.manifest (text) and <name>.shard-<r>-of-<W>.bin, each written
// atomically. Every rank must see the same dir (one machine, or a shared file
// system).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/data/data_error.h"
#include "ddp/dist/process_group.h"

namespace ddp::data {

struct ShardSpec {
  std::string dir;         // where shard files live
  std::string name;        // e.g. "fashion-mnist-train"
  int64_t num_shards = 1;  // world size
  uint64_t seed = 0;       // the permutation that mixes samples before slicing
  // What the source was made from (file paths, sizes, mtimes, normalisation
  // parameters...). Stored in the manifest; shards whose manifest has another
  // source_id are stale. Lets prepare_shards decide without building the source.
  std::string source_id;
};

// Shard r holds the samples perm[r], perm[r + W], ... of a seeded permutation of [0, n), cut so every shard has
// exactly floor(n / W) samples (the n % W left over are dropped, like drop_last).
// Writes W files plus a manifest, each atomically (temporary file, fsync, rename). x may be float32 or uint8, any shape
// [N, ...]; y int64 [N]. The old manifest is removed first, so an interrupted write leaves no valid-looking set. Throws
// ddp::InvalidArgument for bad arguments (n < W, y not int64 [N]...), ddp::Error for I/O failures.
void write_shards(const ShardSpec& spec, const at::Tensor& x, const at::Tensor& y);

// True when the manifest exists and matches spec, and the source fingerprint (n and a cheap checksum you define)
// matches. The fingerprint: N, x's and y's dtypes and shapes, and the CRC-32 of their bytes. The shard files must also
// exist with the sizes the manifest records.
bool shards_up_to_date(const ShardSpec& spec, const at::Tensor& x, const at::Tensor& y);

struct Shard {
  at::Tensor x;
  at::Tensor y;
  at::Tensor index;  // int64 [floor(N / W)]: each sample's row in the source
};
// DataError on missing/corrupt/mismatched files (another spec, another source_id,
// a shard file from another write); InvalidArgument for a rank outside [0, num_shards).
Shard load_shard(const ShardSpec& spec, int64_t rank);

// Rank 0 writes the shards if they are missing or stale, then all ranks meet at a barrier, then each loads its own.
// make_source is called only on rank 0 and only when writing is needed.
// With an empty spec.source_id, staleness can only be judged from the data:
// rank 0 then calls make_source every time and compares fingerprints.
// spec.num_shards must equal group.size(). If rank 0 fails, every rank throws
// (rank 0 its own exception, the others ddp::Error with rank 0's message).
Shard prepare_shards(ProcessGroup& group, const ShardSpec& spec,
                     const std::function<std::pair<at::Tensor, at::Tensor>()>& make_source);

// A source_id for data read from files: each path with its size and
// modification time (ns), joined by "; ". DataError if a file is missing.
std::string file_source_id(const std::vector<std::string>& paths);

// Where the files live: <dir>/<name>.manifest and <dir>/<name>.shard-<r>-of-<W>.bin.
std::string manifest_path(const ShardSpec& spec);
std::string shard_path(const ShardSpec& spec, int64_t rank);

}  // namespace ddp::data
