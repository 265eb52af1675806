// keep_freed_memory(): glibc's malloc keeps large freed blocks for reuse
// instead of returning them to the kernel, unless the user chose otherwise.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>

#include "ddp/train/allocator.h"
#include "support/scoped_env.h"

namespace {

using ddp::test::ScopedEnv;

TEST(Allocator, LargeBlocksComeFromTheHeapAndStayForReuse) {
  ScopedEnv a("DDP_MALLOC", nullptr), b("GLIBC_TUNABLES", nullptr);
  const ddp::train::AllocatorTuning t = ddp::train::keep_freed_memory();
  ASSERT_TRUE(t.applied) << t.description;
  EXPECT_EQ(t.description.rfind("malloc: freed blocks kept for reuse", 0), 0u) << t.description;
  // 16 MiB: over glibc's default threshold (128 KiB, raised at most to 32 MiB by itself), under ours.
  const size_t size = 16u << 20;
  const size_t mmapped_before = mallinfo2().hblkhd;
  void* p = std::malloc(size);
  ASSERT_NE(p, nullptr);
  static_cast<volatile char*>(p)[size - 1] = 1;
  EXPECT_EQ(mallinfo2().hblkhd, mmapped_before) << "a 16 MiB block was mmapped";
  std::free(p);
  // Freed, it stays in the process for the next step's tensors.
  EXPECT_GE(mallinfo2().fordblks, size);
}

TEST(Allocator, TheUsersChoiceWins) {
  {
    ScopedEnv a("DDP_MALLOC", "system"), b("GLIBC_TUNABLES", nullptr);
    const ddp::train::AllocatorTuning t = ddp::train::keep_freed_memory();
    EXPECT_FALSE(t.applied);
    EXPECT_EQ(t.description, "malloc: glibc's defaults (DDP_MALLOC=system)");
  }
  {
    ScopedEnv a("DDP_MALLOC", nullptr), b("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576");
    const ddp::train::AllocatorTuning t = ddp::train::keep_freed_memory();
    EXPECT_FALSE(t.applied);
    EXPECT_EQ(t.description, "malloc: as GLIBC_TUNABLES sets it (glibc.malloc.trim_threshold=1048576)");
  }
}

}  // namespace
