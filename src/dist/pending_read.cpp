#include "dist/pending_read.h"

#include <ATen/ATen.h>

#include "ddp/dist/device.h"

namespace ddp::detail {

PendingRead::PendingRead(const at::Tensor& t) {
  if (!host_reads_wait(t.device())) {
    host_ = t.clone();  // the CPU: the values now, kept from what changes t later
    return;
  }
  if (!wants_pinned_host(t.device())) {  // a device without pinned memory: read now, waiting
    host_ = t.to(at::kCPU);
    return;
  }
  host_ = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host_.copy_(t, /*non_blocking=*/true);  // queued on t's device's current stream, behind the work making t
  copied_ = DeviceMark::now(t.device());
}

const at::Tensor& PendingRead::get() const {
  copied_.wait();
  return host_;
}

}  // namespace ddp::detail
