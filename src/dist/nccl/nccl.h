// The nccl backend. NCCL through LibTorch's c10d ProcessGroupNCCL, on one GPU per process (the
// rank's device, BackendOptions::device); rendezvous over the store, as gloo's.
#pragma once
#include <memory>

#include "dist/backend_impl.h"

namespace ddp::nccl {

// Built against a LibTorch with NCCL, and a GPU is visible.
bool is_available();
std::unique_ptr<detail::Backend> create(const BackendOptions& opts);

}  // namespace ddp::nccl
