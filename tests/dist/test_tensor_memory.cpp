// Tensor memory from the allocator: the CPU's counting wrapper counts every byte a tensor takes and gives back,
// its peak, and leaves the allocator's raw interface working. A binary of its own: the wrapper is process-wide.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "ddp/dist/tensor_memory.h"

namespace ddp {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(TensorMemory, CountsTheCpusTensorsAndTheirPeak) {
  const at::Tensor before = at::ones({1000});  // allocated before counting: never counted, not even when freed
  EXPECT_FALSE(tensor_memory(kCpu).counted);
  ASSERT_TRUE(count_tensor_memory());
  EXPECT_TRUE(count_tensor_memory());  // once
  reset_peak_tensor_memory(kCpu);
  const TensorMemory start = tensor_memory(kCpu);
  EXPECT_TRUE(start.counted);
  EXPECT_EQ(start.peak, start.in_use);
  {
    const at::Tensor a = at::empty({1 << 20}, at::kFloat);   // 4 MiB
    const at::Tensor b = at::empty({3, 1000}, at::kDouble);  // 24,000 bytes
    EXPECT_EQ(tensor_memory(kCpu).in_use, start.in_use + (4 << 20) + 24000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % 64, 0u);  // the base's alignment kept
    const at::Tensor c = at::empty_like(a);                         // 4 MiB more
    EXPECT_EQ(tensor_memory(kCpu).in_use, start.in_use + (8 << 20) + 24000);
  }
  TensorMemory end = tensor_memory(kCpu);
  EXPECT_EQ(end.in_use, start.in_use);
  EXPECT_EQ(end.peak, start.in_use + (8 << 20) + 24000);
  { const at::Tensor gone = before * 2; }  // freed: counted in and out
  EXPECT_EQ(tensor_memory(kCpu).in_use, start.in_use);
  reset_peak_tensor_memory(kCpu);
  EXPECT_EQ(tensor_memory(kCpu).peak, start.in_use);
  // The raw interface (a block's pointer is its own context).
  c10::Allocator* cpu = c10::GetCPUAllocator();
  void* raw = cpu->raw_allocate(100);
  EXPECT_EQ(tensor_memory(kCpu).in_use, start.in_use + 100);
  cpu->raw_deallocate(raw);
  EXPECT_EQ(tensor_memory(kCpu).in_use, start.in_use);
}

TEST(TensorMemory, ADeviceNothingCountsSaysSo) { EXPECT_FALSE(tensor_memory(c10::Device(c10::kMeta)).counted); }

}  // namespace
}  // namespace ddp
