#include "ddp/train/precision.h"

#include <ATen/autocast_mode.h>

#include "ddp/dist/errors.h"

namespace ddp::train {

Precision parse_precision(const std::string& name, const std::string& flag) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  throw InvalidArgument("ddp-train: " + flag + " must be fp32 or bf16, got '" + name + "'");
}

std::string to_string(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Autocast::Autocast(Precision p) : active_(p == Precision::BF16) {
  if (!active_) return;
  was_enabled_ = at::autocast::is_cpu_enabled();
  previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(true);
}

Autocast::~Autocast() {
  if (!active_) return;
  at::autocast::set_cpu_enabled(was_enabled_);
  at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  if (!was_enabled_) at::autocast::clear_cache();  // casts of weights are cached per forward
}

}  // namespace ddp::train
