// The device a piece of work belongs to, made current while it runs on a thread that is not the caller's (the
// group's sequencer, a waiter running a continuation): a CUDA allocation or stream there is then the rank's GPU's,
// not device 0's. Any device type (CPU and meta have no-op guards); an undefined tensor changes nothing.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

namespace ddp::detail {

class DeviceScope {
 public:
  explicit DeviceScope(const at::Tensor& of) {
    if (of.defined()) guard_.reset_device(of.device());
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

}  // namespace ddp::detail
