#include "ddp/train/precision.h"
#include "ddp/torch_compat.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"
#include "ddp/train/machine.h"

namespace ddp::train {

Precision parse_precision(const std::string& name, const std::string& flag) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  throw InvalidArgument("ddp-train: " + flag + " must be fp32, bf16 or auto, got '" + name + "'");
}

std::string to_string(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

namespace {
// oneDNN accepts ISA names in any case.
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}
}  // namespace

Bf16Support bf16_support(const std::string& cpu_flags, const std::string& onednn_max_isa) {
  std::set<std::string> flags;
  std::istringstream in(cpu_flags);
  for (std::string f; in >> f;) flags.insert(f);
  std::string have;
  for (const char* f : {"amx_bf16", "avx512_bf16"})
    if (flags.count(f)) have += (have.empty() ? "" : " and ") + std::string(f);
  if (have.empty()) return {false, "no avx512_bf16 or amx_bf16 in the CPU's flags, so bfloat16 would be emulated"};
  if (!onednn_max_isa.empty()) {
    const std::string isa = upper(onednn_max_isa);
    // oneDNN's ISA names at or above the first with bfloat16 instructions.
    static const std::set<std::string> with_bf16 = {
        "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "ALL",
        "DEFAULT"};
    if (!with_bf16.count(isa))
      return {false, "this CPU has " + have + ", but ONEDNN_MAX_CPU_ISA=" + onednn_max_isa +
                         " keeps oneDNN below its bfloat16 instructions"};
  }
  return {true, "this CPU has " + have};
}

namespace {

std::optional<std::string> onednn_max_isa() {
  namespace le = launch_env;
  const auto isa = le::text(le::kOnednnMaxCpuIsa);
  return isa ? isa : le::text(le::kDnnlMaxCpuIsa);
}

// oneDNN 2.x (LibTorch 1.13's) has bfloat16 convolutions from AVX512_CORE up, but
// ATen sends them to oneDNN by the CPU's flags, not by ONEDNN_MAX_CPU_ISA: with
// oneDNN capped lower, each one throws "could not create a primitive descriptor
// iterator". Then bfloat16 runs on ATen's own kernels, as on a CPU without AVX-512.
void avoid_capped_onednn_for_bf16() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto isa = onednn_max_isa();
    if (!isa) return;
    static const std::set<std::string> below = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"};
    if (below.count(upper(*isa))) at::globalContext().setUserEnabledMkldnn(false);
  });
}

}  // namespace

Bf16Support bf16_support() {
  std::string flags;
  for (const auto& f : cpu_info().flags) flags += f + " ";
  return bf16_support(flags, onednn_max_isa().value_or(""));
}

PrecisionChoice choose_precision(const std::string& name, const Bf16Support& cpu, const std::string& flag) {
  if (name != "auto") return {parse_precision(name, flag), "as asked"};
  return {cpu.native ? Precision::BF16 : Precision::FP32, "auto: " + cpu.why};
}

Bf16Support gpu_bf16_support(const at::Device& device) {
  const c10::DeviceGuard on(device);  // CUDA's hooks ask the current device: this rank's GPU, not cuda:0
  const bool native = at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8();
  return {native, native ? device.str() + " computes in bfloat16 natively"
                         : device.str() + " has no native bfloat16 (compute capability below 8.0)"};
}

Autocast::Autocast(Precision p, at::DeviceType device) : active_(p == Precision::BF16), device_(device) {
  if (!active_) return;
  if (device_ == at::kCPU) avoid_capped_onednn_for_bf16();
  was_enabled_ = compat::autocast_enabled(device_);
  previous_dtype_ = compat::autocast_dtype(device_);
  compat::set_autocast_dtype(device_, at::kBFloat16);
  compat::set_autocast_enabled(device_, true);
}

Autocast::~Autocast() {
  if (!active_) return;
  compat::set_autocast_enabled(device_, was_enabled_);
  compat::set_autocast_dtype(device_, previous_dtype_);
  if (!was_enabled_) at::autocast::clear_cache();  // casts of weights are cached per forward
}

}  // namespace ddp::train
