// Mixed precision on the CPU: LibTorch's autocast in bfloat16.
//
//   {
//     ddp::train::Autocast bf16(ddp::train::Precision::BF16);
//     at::Tensor logits = model(x).to(at::kFloat);   // convolutions, matmuls in bfloat16
//   }
//   loss.backward();                                  // weights and gradients stay float32
//
// Weights, gradients, optimizer state and DDP's buckets stay float32; only the
// forward pass computes in bfloat16 where autocast allows it. On CPUs with
// native bfloat16 (AVX512-BF16, AMX) oneDNN runs such convolutions several
// times faster (ResNet-9: 2.6x per step); elsewhere bfloat16 is emulated and
// slower than float32 (docs/benchmarks.md), so "auto" picks it only where native.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace ddp::train {

enum class Precision { FP32, BF16 };

// "fp32" | "bf16"; throws InvalidArgument naming `flag` otherwise ("auto" goes through choose_precision).
Precision parse_precision(const std::string& name, const std::string& flag = "--precision");
std::string to_string(Precision p);

// What the CPU and oneDNN's settings allow, read from /proc/cpuinfo and ONEDNN_MAX_CPU_ISA.
struct Bf16Support {
  bool native = false;  // avx512_bf16 or amx_bf16 in the flags, and oneDNN not capped below them
  std::string why;      // e.g. "this CPU has avx512_bf16", "no avx512_bf16 or amx_bf16 in /proc/cpuinfo flags"
};
// `cpu_flags`: the "flags" line of /proc/cpuinfo; `onednn_max_isa`: ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), "" if
// unset.
Bf16Support bf16_support(const std::string& cpu_flags, const std::string& onednn_max_isa);
Bf16Support bf16_support();  // this machine's
// A GPU's: native where cuDNN's bfloat16 convolutions run on it (compute capability 8.0 and up).
Bf16Support gpu_bf16_support(const at::Device& device);

struct PrecisionChoice {
  Precision precision = Precision::FP32;
  std::string reason;  // "asked for" or, for auto, why
};
// "fp32" | "bf16" as asked; "auto": bf16 where bfloat16 is native, fp32 elsewhere.
PrecisionChoice choose_precision(const std::string& name, const Bf16Support& cpu = bf16_support(),
                                 const std::string& flag = "--precision");

// Enables autocast (bfloat16) of `device`'s type (the CPU's, or CUDA's) on this
// thread for its lifetime when BF16; restores the previous state after. No effect for FP32. Where ONEDNN_MAX_CPU_ISA
// keeps oneDNN below AVX512_CORE (no bfloat16 convolutions in LibTorch 1.13's
// oneDNN), the first BF16 scope turns oneDNN off for the process, so ATen's own
// kernels run them, as on a CPU without AVX-512.
class Autocast {
 public:
  explicit Autocast(Precision p, at::DeviceType device = at::kCPU);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_;
  at::DeviceType device_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace ddp::train
