// Training allocates and frees the same large tensors every step. glibc's
// malloc serves blocks over 128 KiB (a threshold it raises by itself, at
// times) with mmap and gives them back on free, so every step faults its
// activations in again, zero-filled by the kernel: FashionCNN's step was 20%
// slower for it (docs/benchmarks.md, "Memory allocator").
//
//   ddp::train::AllocatorTuning t = ddp::train::keep_freed_memory();
//   std::cout << t.description << "\n";
//   // malloc: freed blocks kept for reuse (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 2 GiB); DDP_MALLOC=system for
//   glibc's defaults
//
// keep_freed_memory() makes blocks up to 32 MiB come from the heap and keeps
// freed memory up to 2 GiB for reuse, as a caching allocator does: the
// process's resident memory stays near its peak. Trainer calls it, and so do
// ddp-train and ddp-bench. It leaves malloc alone when DDP_MALLOC=system, or
// when GLIBC_TUNABLES already sets either threshold (the user's choice wins).
#pragma once
#include <string>

namespace ddp::train {

struct AllocatorTuning {
  bool applied = false;
  std::string description;  // one line, "malloc: ..."
};

// Process-wide; calling it again changes nothing more.
AllocatorTuning keep_freed_memory();

}  // namespace ddp::train
