// Tensor memory as the allocator sees it: the bytes in use on a device and their peak since the last reset
// (torch.cuda.max_memory_allocated's counterpart, also for the CPU). A GPU: the CUDA caching allocator's own
// statistics. The CPU: LibTorch's CPU allocator counts nothing, so count_tensor_memory() wraps it (process-wide,
// at most once; tensors allocated before it are not counted, not even when they are freed).
//
//   ddp::count_tensor_memory();                       // at start: ddp-train does
//   ddp::reset_peak_tensor_memory(device);
//   ... train a step ...
//   ddp::TensorMemory m = ddp::tensor_memory(device);  // m.peak: bytes
#pragma once
#include <c10/core/Device.h>

#include <cstdint>

namespace ddp {

struct TensorMemory {
  bool counted = false;  // false: nothing counts this device's tensors (the CPU before count_tensor_memory())
  int64_t in_use = 0;    // bytes
  int64_t peak = 0;      // bytes, the most in use at once since the last reset
};

// Counts CPU tensor memory from now on: a wrapper of the CPU allocator (an atomic add per allocation and free).
// Returns false, counting nothing, where the allocator cannot be wrapped (one without a raw deleter).
bool count_tensor_memory();
TensorMemory tensor_memory(const c10::Device& device);
// The peak starts again from the bytes in use now.
void reset_peak_tensor_memory(const c10::Device& device);

}  // namespace ddp
