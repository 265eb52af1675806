// Tensor memory from the allocator (tensor_memory.h): a counting wrapper of LibTorch's CPU allocator, and CUDA's
// caching allocator statistics.
#include "ddp/dist/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

#include "ddp/torch_compat.h"
#ifdef DDP_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ddp {
namespace {

std::atomic<int64_t> g_in_use{0}, g_peak{0};
std::atomic<bool> g_counting{false};
c10::DeleterFnPtr g_base_free = nullptr;  // the wrapped allocator's free

// Each block is the base allocator's, `kHeader` bytes longer: its size sits in front of the data, so the
// data pointer is its own context (the raw interface works) and a free knows what it gives back.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kHeader = 64;  // keeps the base's 64-byte alignment

  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) DDP_ALLOCATE_CONST override {
    void* block = base_->raw_allocate(n + kHeader);
    *static_cast<size_t*>(block) = n;
    const int64_t now = g_in_use.fetch_add(int64_t(n), std::memory_order_relaxed) + int64_t(n);
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* data = static_cast<char*>(block) + kHeader;
    return {data, data, &free_block, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
  DDP_ALLOCATOR_COPY_DATA

 private:
  static void free_block(void* data) {
    if (!data) return;
    void* block = static_cast<char*>(data) - kHeader;
    g_in_use.fetch_sub(int64_t(*static_cast<size_t*>(block)), std::memory_order_relaxed);
    g_base_free(block);
  }

  c10::Allocator* base_;
};

}  // namespace

bool count_tensor_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    if (!base->raw_deleter()) return;  // the header trick needs a block's pointer to be its own context
    g_base_free = base->raw_deleter();
    static auto* counter = new CountingCpuAllocator(base);  // never destroyed: tensors may outlive main
    c10::SetCPUAllocator(counter, /*priority=*/1);
    g_counting.store(true);
  });
  return g_counting.load();
}

TensorMemory tensor_memory(const c10::Device& device) {
  TensorMemory m;
  if (device.is_cpu()) {
    m.counted = g_counting.load();
    m.in_use = g_in_use.load();
    m.peak = g_peak.load();
  }
#ifdef DDP_HAVE_CUDA
  if (device.is_cuda()) {  // not yet run on a GPU
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto& bytes = stats.allocated_bytes[0];  // StatType::AGGREGATE
    m.counted = true;
    m.in_use = bytes.current;
    m.peak = bytes.peak;
  }
#endif
  return m;
}

void reset_peak_tensor_memory(const c10::Device& device) {
  if (device.is_cpu()) g_peak.store(g_in_use.load());
#ifdef DDP_HAVE_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

}  // namespace ddp
