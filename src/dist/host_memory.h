// Raw pointers for loops that run on the host: only into CPU memory, checked where the loop is entered. A tensor
// on a GPU (or the meta device) is refused with the place named, instead of a host read of device memory.
//
//   const int* counts = host_data<int>(used, "DistributedDataParallel's unused-parameter counts");
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "ddp/errors.h"

namespace ddp::detail {

inline void require_host(const at::Tensor& t, const char* what) {
  if (!t.defined() || t.is_cpu()) return;
  throw InvalidArgument(std::string(what) + ": its loop reads memory on the host, and the tensor is on " +
                        t.device().str() + "; this is a bug in ddp: pass a CPU tensor, or use tensor ops here");
}

template <typename T>
T* host_data(const at::Tensor& t, const char* what) {
  require_host(t, what);
  return t.data_ptr<T>();
}

inline void* host_bytes(const at::Tensor& t, const char* what) {
  require_host(t, what);
  return t.data_ptr();
}

}  // namespace ddp::detail
