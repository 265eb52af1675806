// The text manifest of a set of shard files (<dir>/<name>.manifest): what was
// written, from what, and which files with which sizes. Private to data/.
//
//   ddp-shards-manifest 1
//   name=fashion-mnist-train
//   num_shards=3
//   seed=0
//   samples=60000
//   per_shard=20000
//   source_id=/usr/share/datasets/...
//   fingerprint=n=60000 x=float32[60000,1,28,28] y=int64[60000] crc32=0x1234ABCD
//   write_id=0x89ABCDEF
//   shard.0=fashion-mnist-train.shard-0-of-3.bin 62720123
//   ...
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::data::detail {

struct Manifest {
  std::string name;
  int64_t num_shards = 0;
  uint64_t seed = 0;
  int64_t samples = 0;
  int64_t per_shard = 0;
  std::string source_id;
  std::string fingerprint;
  std::string write_id;
  std::vector<std::pair<std::string, uint64_t>> files;  // file name (in the manifest's dir), size in bytes
};

std::string format_manifest(const Manifest& m);
// nullopt when the file does not exist; DataError (file, line, what) when it is malformed.
std::optional<Manifest> read_manifest(const std::string& path);

}  // namespace ddp::data::detail
