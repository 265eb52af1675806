// What differs between the LibTorch lines ddp builds against (Debian's 1.13 and 2.x), in one place.
#pragma once
#include <torch/version.h>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>

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
inline OptimizerStateKey optimizer_state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }
#endif

// The owning pointer autograd hands out for a node such as a parameter's gradient accumulator:
// std::shared_ptr<Node> up to 2.11, c10::intrusive_ptr<Node> in 2.15. Taken from the function itself.
using AutogradNodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// CPU autocast: 1.13 has per-CPU functions, which 2.4+ deprecates for the per-device ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline bool cpu_autocast_enabled() { return at::autocast::is_autocast_enabled(at::kCPU); }
inline void set_cpu_autocast_enabled(bool on) { at::autocast::set_autocast_enabled(at::kCPU, on); }
inline at::ScalarType cpu_autocast_dtype() { return at::autocast::get_autocast_dtype(at::kCPU); }
inline void set_cpu_autocast_dtype(at::ScalarType t) { at::autocast::set_autocast_dtype(at::kCPU, t); }
#else
inline bool cpu_autocast_enabled() { return at::autocast::is_cpu_enabled(); }
inline void set_cpu_autocast_enabled(bool on) { at::autocast::set_cpu_enabled(on); }
inline at::ScalarType cpu_autocast_dtype() { return at::autocast::get_autocast_cpu_dtype(); }
inline void set_cpu_autocast_dtype(at::ScalarType t) { at::autocast::set_autocast_cpu_dtype(t); }
#endif

}  // namespace ddp::compat
