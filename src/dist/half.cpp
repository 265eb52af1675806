#include "ddp/dist/half.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <cstring>

#include "ddp/errors.h"
#include "dist/host_memory.h"

namespace ddp {
namespace {

bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

__attribute__((target("avx,f16c"))) int64_t float_to_half_f16c(const float* in, uint16_t* out, int64_t n,
                                                               float divisor) {
  const __m256 d = _mm256_set1_ps(divisor);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_div_ps(_mm256_loadu_ps(in + i), d);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;  // the rest is done one by one
}

__attribute__((target("avx,f16c"))) int64_t add_half_f16c(const uint16_t* in, uint16_t* inout, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(inout + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(inout + i),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

// float32 -> bfloat16, rounding to nearest-even as c10::BFloat16 does (NaN stays a quiet NaN);
// plain integer operations that the compiler vectorises for AVX2.
__attribute__((target("avx2"))) void float_to_bfloat16_avx2(const float* in, uint16_t* out, int64_t n, float divisor) {
  for (int64_t i = 0; i < n; ++i) {
    const float f = in[i] / divisor;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    out[i] = f != f ? uint16_t(0x7FC0) : uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace

at::Tensor to_16bit(const at::Tensor& src, at::ScalarType dtype, double divisor) {
  if (src.scalar_type() != at::kFloat || (dtype != at::kHalf && dtype != at::kBFloat16))
    throw InvalidArgument(std::string("to_16bit: converts float32 to Half or BFloat16, got ") +
                          c10::toString(src.scalar_type()) + " to " + c10::toString(dtype));
  if (!src.is_cpu()) {
    // On the tensor's own device (a GPU, meta): device ops, never a host read; one rounding, after the division
    // in float32, as below (CUDA divides by a multiplication with the reciprocal: it may differ in the last bit).
    return (divisor == 1.0 ? src : src.div(divisor)).to(dtype);
  }
  const at::Tensor in = src.contiguous();
  at::Tensor out = at::empty(src.sizes(), src.options().dtype(dtype));
  const float* x = detail::host_data<float>(in, "to_16bit");
  auto* y = static_cast<uint16_t*>(detail::host_bytes(out, "to_16bit"));
  const int64_t n = in.numel();
  const float d = static_cast<float>(divisor);
  if (dtype == at::kBFloat16) {
    if (have_avx2())
      float_to_bfloat16_avx2(x, y, n, d);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = c10::BFloat16(x[i] / d).x;
    return out;
  }
  int64_t i = have_f16c() ? float_to_half_f16c(x, y, n, d) : 0;
  for (; i < n; ++i) y[i] = c10::Half(x[i] / d).x;
  return out;
}

namespace detail {

void add_half(const uint16_t* in, uint16_t* inout, int64_t n) {
  int64_t i = have_f16c() ? add_half_f16c(in, inout, n) : 0;
  for (; i < n; ++i)
    inout[i] =
        c10::Half(float(c10::Half(in[i], c10::Half::from_bits())) + float(c10::Half(inout[i], c10::Half::from_bits())))
            .x;
}

void add_bfloat16(const uint16_t* in, uint16_t* inout, int64_t n) {
  // Plain bit operations: the compiler vectorises this loop.
  for (int64_t i = 0; i < n; ++i)
    inout[i] = c10::BFloat16(float(c10::BFloat16(in[i], c10::BFloat16::from_bits())) +
                             float(c10::BFloat16(inout[i], c10::BFloat16::from_bits())))
                   .x;
}

}  // namespace detail
}  // namespace ddp
