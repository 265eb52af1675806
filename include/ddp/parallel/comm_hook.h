// Communication hooks: how DDP reduces one bucket of gradients.
//
// A hook receives a GradBucket (a flat buffer holding the gradients of some
// parameters) and returns a Work whose value() is the reduced (averaged)
// buffer: a collective's Work (all_reduce's value is its tensor), or one
// chained from it with then() (e.g. decompression).
// The default hook averages with one asynchronous all_reduce. Compression
// hooks (fp16, PowerSGD) implement the same interface.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"

namespace ddp {

struct GradBucket {
  size_t index = 0;
  size_t num_buckets = 0;
  at::Tensor buffer;                  // flat, contiguous: this bucket's gradients
  std::vector<at::Tensor> gradients;  // views into buffer, shaped like the parameters
  std::vector<at::Tensor> parameters;
  bool is_last() const { return index + 1 == num_buckets; }
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual Work run(ProcessGroup& group, GradBucket& bucket) = 0;
  // What a checkpoint keeps of the hook's state (this rank's), and back;
  // stateless hooks have none (an empty IValue).
  virtual c10::IValue state_dict() const { return {}; }
  virtual void load_state_dict(const c10::IValue& state) {}
};

// Divides by the world size, then one all_reduce (SUM) of the buffer in place:
// asynchronous, the last bucket too (a hook must not wait). What DDP does with no hook
// registered, with one pass over memory more (DDP divides while it fills the
// bucket); an example of a hook.
class AllReduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  Work run(ProcessGroup& group, GradBucket& bucket) override;
};

// PyTorch's fp16_compress_hook and bf16_compress_hook: the bucket is divided by
// the world size and cast to a 16-bit float (one rounding; PyTorch casts, then
// divides), all-reduced (SUM) in that type and cast back into the bucket. Half
// the bytes on the wire on every backend; each averaged gradient carries 11
// (fp16) or 8 (bf16) significant bits, and fp16 overflows past 65504 (bf16 has
// float32's range).
class CompressHook final : public CommHook {
 public:
  explicit CompressHook(at::ScalarType dtype);  // at::kHalf or at::kBFloat16
  std::string name() const override;            // "fp16" or "bf16"
  Work run(ProcessGroup& group, GradBucket& bucket) override;

 private:
  at::ScalarType dtype_;
};

// The hooks by the names ddp-train's --comm-hook takes: "allreduce", "fp16",
// "bf16", "powersgd[:options]", "batched_powersgd[:options]" (options:
// powersgd.h's parse_powersgd_spec). An unknown name or a bad option throws
// InvalidArgument naming the valid ones.
std::shared_ptr<CommHook> make_comm_hook(const std::string& name);
std::vector<std::string> comm_hook_names();

}  // namespace ddp
