#include "ddp/train/allocator.h"

#include <malloc.h>

#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "ddp/dist/launch_env.h"

namespace ddp::train {
namespace {

// glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2: 32 MiB on 64-bit.
constexpr int kMmapThreshold = 32 << 20;
constexpr int kTrimThreshold = INT_MAX;  // ~2 GiB: mallopt takes an int

}  // namespace

AllocatorTuning keep_freed_memory() {
  AllocatorTuning t;
  if (launch_env::choice(launch_env::kMalloc) == std::optional<std::string>("system")) {
    t.description = "malloc: glibc's defaults (DDP_MALLOC=system)";
    return t;
  }
  const std::string tunables = launch_env::text(launch_env::kGlibcTunables).value_or("");
  for (std::string_view name :
       {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.mmap_max"}) {
    if (tunables.find(name) != std::string::npos) {
      t.description = "malloc: as GLIBC_TUNABLES sets it (" + tunables + ")";
      return t;
    }
  }
  // Both, or neither helps: a fixed mmap threshold alone still trims the heap's
  // top after each step; a trim threshold alone fixes the mmap threshold at 128 KiB.
  t.applied = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  t.description = t.applied ? "malloc: freed blocks kept for reuse (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 2 GiB); "
                              "DDP_MALLOC=system for glibc's defaults"
                            : "malloc: glibc's defaults (mallopt refused the thresholds)";
  return t;
}

}  // namespace ddp::train
