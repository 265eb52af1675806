// What differs between the LibTorch lines ddp builds against (Debian's 1.13 and 2.x), in one place.
#pragma once
#include <torch/version.h>

#include <ATen/ATen.h>
#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <string>
#include <utility>
#if TORCH_VERSION_MAJOR < 2
#include <c10/util/string_utils.h>
#endif

namespace ddp::compat {

// torch::optim::Optimizer::state() is keyed by the parameter's TensorImpl: 1.13 by its address
// written as a string (c10::guts::to_string), 2.x by the address itself.
#if TORCH_VERSION_MAJOR >= 2
using OptimizerStateKey = void*;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

// The owning pointer autograd hands out for a node such as a parameter's gradient accumulator:
// std::shared_ptr<Node> up to 2.11, c10::intrusive_ptr<Node> in 2.15. Taken from the function itself.
using AutogradNodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// Autocast of the CPU or CUDA: 1.13 has per-device-type functions (CUDA's unprefixed), which 2.4+ deprecates
// for the ones taking the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool autocast_enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
inline void set_autocast_enabled(at::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
inline at::ScalarType autocast_dtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
inline void set_autocast_dtype(at::DeviceType d, at::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
inline bool autocast_enabled(at::DeviceType d) {
  return d == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
inline void set_autocast_enabled(at::DeviceType d, bool on) {
  d == at::kCPU ? at::autocast::set_cpu_enabled(on) : at::autocast::set_enabled(on);
}
inline at::ScalarType autocast_dtype(at::DeviceType d) {
  return d == at::kCPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast_dtype(at::DeviceType d, at::ScalarType t) {
  d == at::kCPU ? at::autocast::set_autocast_cpu_dtype(t) : at::autocast::set_autocast_gpu_dtype(t);
}
#endif

// c10::Allocator: allocate() is const up to 2.2; 2.3 made it non-const and added copy_data(), pure virtual.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define DDP_ALLOCATE_CONST
#define DDP_ALLOCATOR_COPY_DATA \
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
#define DDP_ALLOCATE_CONST const
#define DDP_ALLOCATOR_COPY_DATA
#endif

// Whether causal attention over q [B, H, T, D] runs 2.x's fused kernel. On a GPU always. On a CPU the fused
// (flash) kernel pays only for long sequences: in bfloat16 a whole step of nanoGPT's CPU configuration (T = 64)
// takes 24 ms through it and 14 through the composition below, in float32 as long either way; the composition
// alone is faster up to T = 512 in 16-bit and T = 128 in float32 (docs/benchmarks.md, "Attention on a CPU").
// Below AVX-512, 2.x's kernel refuses 16-bit tensors ("pack_vnni2 is only supported when avx512 is
// supported"). 1.13 has no fused kernel.
inline bool fused_attention(const at::Tensor& q) {
#if TORCH_VERSION_MAJOR >= 2
  if (!q.is_cpu()) return true;
  if (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) {
    static const bool below_avx512 = at::get_cpu_capability() != "AVX512";
    return !below_avx512 && q.size(-2) > 512;
  }
  return q.size(-2) > 128;
#else
  (void)q;
  return false;
#endif
}

// Causal scaled dot-product attention of q, k, v [B, H, T, D] (dropout on the weights, 0 in evaluation): the
// fused kernel where fused_attention(q), else its composition (a masked softmax of q k^T / sqrt(D), times v).
inline at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout) {
#if TORCH_VERSION_MAJOR >= 2
  if (fused_attention(q)) return at::scaled_dot_product_attention(q, k, v, {}, dropout, /*is_causal=*/true);
#endif
  // One batched GEMM adds the causal mask (-inf above the diagonal) to q k^T / sqrt(D): no pass of its own for
  // the scale and the mask.
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  at::Tensor mask = at::full({t, t}, -INFINITY, q.options()).triu(1);
  at::Tensor att = at::baddbmm(mask, q.reshape({b * h, t, d}), k.reshape({b * h, t, d}).transpose(1, 2), 1.0,
                               1.0 / std::sqrt(double(d)));
  att = at::softmax(att, -1);
  if (dropout > 0) att = at::dropout(att, dropout, /*train=*/true);
  return at::bmm(att, v.reshape({b * h, t, d})).view({b, h, t, d});
}

}  // namespace ddp::compat
