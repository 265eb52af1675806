#include "ddp/parallel/comm_hook.h"

#include <ATen/ATen.h>

namespace ddp {

Work AllReduceHook::run(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  buffer.div_(group.size());
  AllReduceOptions o;
  o.async_op = !bucket.is_last();  // the last one has nothing left to overlap with
  return group.all_reduce(buffer, o);  // value(): the buffer, reduced
}

}  // namespace ddp
