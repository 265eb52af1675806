#include "ddp/parallel/comm_hook.h"

#include <ATen/ATen.h>

#include "ddp/dist/half.h"
#include "ddp/errors.h"
#include "ddp/parallel/powersgd.h"

namespace ddp {

Work AllReduceHook::run(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  buffer.div_(group.size());
  AllReduceOptions o;
  o.async_op = true;                   // the last bucket too: a hook must not wait (DDP waits at the end of backward)
  return group.all_reduce(buffer, o);  // value(): the buffer, reduced
}

CompressHook::CompressHook(at::ScalarType dtype) : dtype_(dtype) {
  if (dtype != at::kHalf && dtype != at::kBFloat16)
    throw InvalidArgument(std::string("CompressHook: dtype must be Half or BFloat16, got ") + c10::toString(dtype));
}

std::string CompressHook::name() const { return dtype_ == at::kHalf ? "fp16" : "bf16"; }

Work CompressHook::run(ProcessGroup& group, GradBucket& bucket) {
  // Divide while compressing: one rounding where PyTorch's hooks round twice (cast, then divide).
  at::Tensor compressed = bucket.buffer.scalar_type() == at::kFloat ? to_16bit(bucket.buffer, dtype_, group.size())
                                                                    : bucket.buffer.to(dtype_).div_(group.size());
  AllReduceOptions o;
  o.async_op = true;
  at::Tensor buffer = bucket.buffer;
  return group.all_reduce(compressed, o).then([buffer](at::Tensor reduced) mutable {
    buffer.copy_(reduced);  // decompress into the bucket
    return buffer;
  });
}

std::vector<std::string> comm_hook_names() { return {"allreduce", "fp16", "bf16", "powersgd", "batched_powersgd"}; }

std::shared_ptr<CommHook> make_comm_hook(const std::string& name) {
  if (name == "allreduce") return std::make_shared<AllReduceHook>();
  if (name == "fp16") return std::make_shared<CompressHook>(at::kHalf);
  if (name == "bf16") return std::make_shared<CompressHook>(at::kBFloat16);
  const std::string head = name.substr(0, name.find(':'));
  if (head == "powersgd" || head == "batched_powersgd") {
    bool batched = false;
    PowerSGDOptions o = parse_powersgd_spec(name, &batched);
    return std::make_shared<PowerSGDHook>(o, batched);
  }
  std::string valid;
  for (const auto& n : comm_hook_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw InvalidArgument("unknown comm hook '" + name + "'; valid: " + valid);
}

}  // namespace ddp
