// Tensors made host tensors storage by storage (host_snapshot.cpp): a storage is copied to host memory once, whole,
// and each tensor becomes the same view (offset, sizes, strides) of that copy, so views and tied tensors stay views
// of one copy, as the file keeps them (one record per storage). Used by host_snapshot (every storage copied: the
// training goes on while the copy is written) and by the file writer (device storages only, which the host cannot
// read: a tensor on a GPU is copied once however many tensors share it).
#pragma once
#include <ATen/core/Tensor.h>

#include <unordered_map>

namespace ddp::train::detail {

class HostCopies {
 public:
  explicit HostCopies(bool copy_host_tensors) : copy_host_(copy_host_tensors) {}
  // t on the host: t itself (a host tensor, copy_host_tensors false), or the view of its storage's copy. A copy from
  // a GPU waits for the work queued on its storage. c10::Error for a tensor that is not dense or has no memory.
  at::Tensor operator()(const at::Tensor& t);

 private:
  bool copy_host_;
  struct Copy {
    at::Storage source;  // held, so that its address, the key, is not another storage's while this lives
    at::Storage copy;
  };
  std::unordered_map<const c10::StorageImpl*, Copy> copies_;
};

}  // namespace ddp::train::detail
