// Buffers on a device a backend cannot use for an op: the front stages them.
//
// Each backend says where it runs an op for a buffer on a given device
// (Backend::device_for): gloo runs all_reduce and broadcast on CUDA tensors and
// everything else on the host, MPI everything on the host, NCCL everything on
// its GPU. with_staging wraps a backend so that a buffer elsewhere is copied
// there before the call and its result copied back after it succeeds: CUDA
// tensors over MPI, a CPU flag over NCCL. Buffers already where the backend
// runs pass through untouched (the CPU paths cost one comparison).
#pragma once
#include <memory>

#include "dist/backend_impl.h"

namespace ddp::detail {

std::unique_ptr<Backend> with_staging(std::unique_ptr<Backend> backend);

}  // namespace ddp::detail
