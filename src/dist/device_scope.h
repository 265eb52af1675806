// The device a piece of work belongs to, made current while it runs on a thread that is not the caller's (the
// group's sequencer, a waiter running a continuation): a CUDA allocation or stream there is then the rank's GPU's,
// not device 0's. Any device type (CPU and meta have no-op guards); an undefined tensor changes nothing.
//
// StreamScope goes one further, as c10's Future does for its callbacks: the caller's current stream of that device,
// taken where the work is asked for (caller_stream), is made current where it runs later. A collective issued
// there then waits for what the caller queued before it (ProcessGroupNCCL orders its stream after the current
// one), and a continuation's kernels queue where the caller's next ones will. On the CPU it is a device guard.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <optional>

namespace ddp::detail {

class DeviceScope {
 public:
  explicit DeviceScope(const at::Tensor& of) {
    if (of.defined()) guard_.reset_device(of.device());
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

// This thread's current stream of `of`'s device (none for an undefined tensor).
inline std::optional<c10::Stream> caller_stream(const at::Tensor& of) {
  if (!of.defined()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(of.device().type())->getStream(of.device());
}

class StreamScope {
 public:
  explicit StreamScope(const std::optional<c10::Stream>& stream) {
    if (stream) guard_.reset_stream(*stream);
  }

 private:
  c10::OptionalStreamGuard guard_;
};

}  // namespace ddp::detail
