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
// times faster (ResNet-9 here: 2.6x per step); elsewhere it may be slower.
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

namespace ddp::train {

enum class Precision { FP32, BF16 };

// "fp32" | "bf16"; throws InvalidArgument naming `flag` otherwise.
Precision parse_precision(const std::string& name, const std::string& flag = "--precision");
std::string to_string(Precision p);

// Enables CPU autocast (bfloat16) on this thread for its lifetime when BF16;
// restores the previous state after. No effect for FP32.
class Autocast {
 public:
  explicit Autocast(Precision p);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace ddp::train
