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
  bucket.buffer.div_(group.size());
  return detail::all_reduce_bucket(group, bucket);
}

namespace detail {

TensorFuture all_reduce_bucket(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  AllReduceOptions o;
  // The last bucket is launched once backward has computed every gradient:
  // nothing is left to overlap, and a blocking call lets a backend run it on
  // this thread (mpi) instead of handing it to its communication thread.
  o.async_op = !bucket.is_last();
  Work w = group.all_reduce(buffer, o);
  return TensorFuture(std::move(w), [buffer] { return buffer; });
}

}  // namespace detail

}  // namespace ddp
