// Every random stream of a run, derived from the seed in one place.
#pragma once
#include <cstdint>

namespace ddp::train::detail {

enum class Stream { kWeights, kDropout, kShardOrder, kAugment };
uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t epoch = 0);

}  // namespace ddp::train::detail
