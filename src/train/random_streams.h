// Every random stream of a run, derived from the seed in one place.
#pragma once
#include <cstdint>

namespace ddp::train::detail {

enum class Stream { kWeights, kDropout, kShardOrder, kAugment };
// `index`: the epoch of a shard's shuffle; for dropout, the step a change of world (in-place recovery, or a
// resume at another world size) happened at: each rank's generator then starts afresh from (seed, rank, step), so
// that a run is a function of its worlds and the steps they changed at, however a failure fell within a step.
uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t index = 0);

}  // namespace ddp::train::detail
