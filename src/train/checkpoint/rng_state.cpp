// The generators' states (the CPU's, and the default generator of any device), for checkpoints.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"

namespace ddp::train {

at::Tensor get_rng_state() { return get_rng_state(at::Device(at::kCPU)); }

void set_rng_state(const at::Tensor& state) { set_rng_state(at::Device(at::kCPU), state); }

at::Tensor get_rng_state(const at::Device& device) {
  at::Generator gen = at::globalContext().defaultGenerator(device);  // the CPU's, or this GPU's
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const at::Device& device, const at::Tensor& state) {
  const int64_t expected = get_rng_state(device).numel();
  if (!state.defined() || state.scalar_type() != at::kByte || !state.device().is_cpu() || state.dim() != 1 ||
      state.numel() != expected)
    throw InvalidArgument("set_rng_state: expected " +
                          (device.is_cpu() ? std::string("torch.get_rng_state()'s") : device.str() + "'s generator") +
                          " 1-D uint8 CPU tensor of " + std::to_string(expected) + " bytes, got " +
                          (state.defined() ? std::string(c10::toString(state.scalar_type())) + " " +
                                                 c10::str(state.sizes()) + " on " + state.device().str()
                                           : std::string("an undefined tensor")));
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state.contiguous());
  } catch (const c10::Error& e) {
    throw InvalidArgument(std::string("set_rng_state: not a valid generator state: ") + e.what_without_backtrace());
  }
}

}  // namespace ddp::train
