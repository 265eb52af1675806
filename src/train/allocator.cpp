#include "ddp/train/allocator.h"

#include <malloc.h>

#include <climits>
#include <cstdlib>
#include <string_view>

namespace ddp::train {
namespace {

// glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2: 32 MiB on 64-bit.
constexpr int kMmapThreshold = 32 << 20;
constexpr int kTrimThreshold = INT_MAX;  // ~2 GiB: mallopt takes an int

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

AllocatorTuning keep_freed_memory() {
  AllocatorTuning t;
  const std::string choice = env("DDP_MALLOC");
  if (choice == "system") {
    t.description = "malloc: glibc's defaults (DDP_MALLOC=system)";
    return t;
  }
  const std::string tunables = env("GLIBC_TUNABLES");
  for (std::string_view name : {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.mmap_max"}) {
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
