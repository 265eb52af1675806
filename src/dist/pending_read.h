// A small tensor's values on their way to the host, read later without the host waiting for a GPU's queue
// (issue 45: no host sync on the step path). On a GPU: a non-blocking copy into pinned memory, queued on the
// device's current stream, and a mark after it; get() waits for that mark only (a step later it has long been
// reached), never for the work queued after it, so the GPU's queue never drains. Elsewhere: a copy made at once
// (on the CPU nothing is queued).
//
//   PendingRead sums(device_sums);   ... queue the next step ...   const at::Tensor& host = sums.get();
#pragma once
#include <ATen/core/Tensor.h>

#include "dist/device_mark.h"

namespace ddp::detail {

class PendingRead {
 public:
  PendingRead() = default;  // nothing on its way: valid() is false
  explicit PendingRead(const at::Tensor& t);
  bool valid() const { return host_.defined(); }
  // The values, on the host (a CPU tensor of t's shape and dtype); waits for the copy as said above.
  const at::Tensor& get() const;

 private:
  at::Tensor host_;
  DeviceMark copied_;
};

}  // namespace ddp::detail
