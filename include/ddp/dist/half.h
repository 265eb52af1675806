// float32 -> float16/bfloat16 conversion with a division folded in, and 16-bit
// sums: what compression hooks and 16-bit reductions run on every element.
// LibTorch 1.13 casts float to half one element at a time in software (about
// 5 ns per element); these use the CPU's F16C instructions where it has them
// (every x86-64 CPU with AVX2), rounding to nearest-even as the cast does.
//
//   at::Tensor h = ddp::to_16bit(grads, at::kHalf, world);   // == (grads / world).to(at::kHalf)
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ddp {

// (src / divisor) rounded to `dtype` (at::kHalf or at::kBFloat16); src is float32.
at::Tensor to_16bit(const at::Tensor& src, at::ScalarType dtype, double divisor = 1.0);

namespace detail {
// inout[i] = round16(float(inout[i]) + float(in[i])) for n elements of float16
// or bfloat16 bits (MPI's reduction function for SUM).
void add_half(const uint16_t* in, uint16_t* inout, int64_t n);
void add_bfloat16(const uint16_t* in, uint16_t* inout, int64_t n);
}  // namespace detail

}  // namespace ddp
