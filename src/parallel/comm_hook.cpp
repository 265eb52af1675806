#include "ddp/parallel/comm_hook.h"

#include <ATen/ATen.h>

namespace ddp {

TensorFuture::TensorFuture(Work work, std::function<at::Tensor()> value)
    : work_(std::move(work)), value_(std::move(value)) {}

TensorFuture::TensorFuture(at::Tensor ready) : value_([ready] { return ready; }) {}

bool TensorFuture::is_completed() { return work_.is_completed(); }

at::Tensor TensorFuture::wait() {
  work_.wait();
  return value_ ? value_() : at::Tensor();
}

TensorFuture AllReduceHook::run(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  buffer.div_(group.size());
  AllReduceOptions o;
  o.async_op = !bucket.is_last();  // the last one has nothing left to overlap with
  Work w = group.all_reduce(buffer, o);
  return TensorFuture(std::move(w), [buffer] { return buffer; });
}

}  // namespace ddp
