// Communication hooks: how DDP reduces one bucket of gradients.
//
// A hook receives a GradBucket (a flat buffer holding the gradients of some
// parameters) and returns a TensorFuture of the reduced (averaged) buffer.
// The default hook averages with one asynchronous all_reduce. Compression
// hooks (fp16, PowerSGD) implement the same interface.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp {

struct GradBucket {
  size_t index = 0;
  size_t num_buckets = 0;
  at::Tensor buffer;                   // flat, contiguous: this bucket's gradients
  std::vector<at::Tensor> gradients;   // views into buffer, shaped like the parameters
  std::vector<at::Tensor> parameters;
  bool is_last() const { return index + 1 == num_buckets; }
};

// The result of a hook: a Work plus the tensor that holds the result once the
// Work is done (produced by `value`, which runs after the wait).
class TensorFuture {
 public:
  TensorFuture() = default;
  TensorFuture(Work work, std::function<at::Tensor()> value);
  explicit TensorFuture(at::Tensor ready);
  bool is_completed();
  // Waits, then returns the reduced tensor (same numel and dtype as the bucket).
  at::Tensor wait();

 private:
  Work work_;
  std::function<at::Tensor()> value_;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual TensorFuture run(ProcessGroup& group, GradBucket& bucket) = 0;
};

// Divides by the world size, then one all_reduce (SUM) of the buffer in place:
// asynchronous, except for the last bucket. What DDP does with no hook
// registered, with one pass over memory more (DDP divides while it fills the
// bucket); an example of a hook.
class AllReduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  TensorFuture run(ProcessGroup& group, GradBucket& bucket) override;
};

}  // namespace ddp
