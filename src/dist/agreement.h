// Before a collective, the ranks compare the call (CallCheck, process_group.h): its sequence number, op, dtype,
// shape, reduce op and root. kHash all_gathers a 64-bit hash of that fingerprint and gathers the fingerprints
// only when the hashes differ; kDetail gathers the fingerprints every time. A mismatch, which would otherwise
// hang or abort inside gloo or MPI, throws ddp::Error on every rank naming the op, the sequence number and each
// differing rank's view.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "ddp/dist/process_group.h"
#include "dist/backend_impl.h"

namespace ddp::detail {

// The level DDP_DEBUG (else TORCH_DISTRIBUTED_DEBUG) asks for: OFF, INFO or DETAIL (any case); unset or INFO:
// kHash where `host_gathers` (the backend gathers CPU tensors itself), else kOff. Another value: InvalidArgument.
CallCheck default_call_check(bool host_gathers);

constexpr int kFingerprintLength = 16;
// This rank's view of the call: kFingerprintLength int64 values. `t` may be
// undefined (barrier); reduce_op and root are -1 where they do not apply.
// For all_to_all only the dtype counts (its sizes may differ per rank).
at::Tensor fingerprint(const Call& c, const at::Tensor& t, int reduce_op, int root);
// "#5 all_reduce float32[8] sum" from one fingerprint.
std::string describe_fingerprint(const int64_t* f);

// Compares the call across the ranks of `b` as `level` says and throws ddp::Error (prefixed with c's context)
// if any rank's differs from rank 0's. Every rank throws alike. Nothing for kOff or a world of one.
void check_agreement(Backend& b, const Call& c, const at::Tensor& t, int reduce_op, int root, CallCheck level);

}  // namespace ddp::detail
