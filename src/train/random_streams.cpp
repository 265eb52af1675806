#include "random_streams.h"

namespace ddp::train::detail {

uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t index) {
  const uint64_t base = seed * 1000003, r = uint64_t(rank);
  switch (stream) {
    case Stream::kWeights:
      return seed;  // the same initial weights on every rank
    case Stream::kDropout:
      return base + 1 + r + uint64_t(index) * 0x9E3779B97F4A7C15ull;  // differs across ranks (and world changes)
    case Stream::kShardOrder:
      return base + uint64_t(index) * 7919 + r;  // a shard's shuffle, per epoch
    case Stream::kAugment:
      return base + 17 * r + 5;  // the loader's crops and flips
  }
  return seed;
}

}  // namespace ddp::train::detail
