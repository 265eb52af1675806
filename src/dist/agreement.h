// DDP_DEBUG=DETAIL (alias TORCH_DISTRIBUTED_DEBUG=DETAIL): before every
// collective, the ranks all_gather a small fingerprint of the call (sequence
// number, op, dtype, shape, reduce op, root) and compare. A mismatch, which
// would otherwise hang or abort inside gloo, throws ddp::Error on every rank
// naming the op, the sequence number and each differing rank's view.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "dist/backend_impl.h"

namespace ddp::detail {

// True when DDP_DEBUG or TORCH_DISTRIBUTED_DEBUG is DETAIL (case-insensitive).
bool agreement_checks_enabled();

constexpr int kFingerprintLength = 16;
// This rank's view of the call: kFingerprintLength int64 values. `t` may be
// undefined (barrier); reduce_op and root are -1 where they do not apply.
// For all_to_all only the dtype counts (its sizes may differ per rank).
at::Tensor fingerprint(const Call& c, const at::Tensor& t, int reduce_op, int root);
// "#5 all_reduce float32[8] sum" from one fingerprint.
std::string describe_fingerprint(const int64_t* f);

// Gathers every rank's fingerprint over `b` and throws ddp::Error (prefixed
// with c's context) if any differs from rank 0's. Every rank throws alike.
void check_agreement(Backend& b, const Call& c, const at::Tensor& t, int reduce_op, int root);

}  // namespace ddp::detail
