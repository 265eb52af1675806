// host_snapshot (checkpoint.h): a checkpoint's containers rebuilt and its tensors' storages copied to host memory,
// each storage once, so that views and tied tensors stay views of one copy (as the pickle writer keeps them); and
// HostCopies (host_copies.h), which does the copying for it and for the writer.
#include <ATen/ATen.h>

#include "ddp/train/checkpoint.h"
#include "train/checkpoint/host_copies.h"

namespace ddp::train {
namespace {

class Snapshot {
 public:
  c10::IValue copy(const c10::IValue& v) {
    if (v.isTensor()) return tensor(v.toTensor());
    if (v.isGenericDict()) {
      const auto in = v.toGenericDict();
      c10::impl::GenericDict out(in.keyType(), in.valueType());
      out.reserve(in.size());
      for (const auto& e : in) out.insert(copy(e.key()), copy(e.value()));
      return out;
    }
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(tensor(t));
      return out;
    }
    if (v.isList()) {
      const auto in = v.toList();
      c10::impl::GenericList out(in.elementType());
      out.reserve(in.size());
      for (const c10::IValue& e : in) out.push_back(copy(e));
      return out;
    }
    if (v.isTuple()) {
      std::vector<c10::IValue> items;
      for (const c10::IValue& e : v.toTupleRef().elements()) items.push_back(copy(e));
      return c10::ivalue::Tuple::create(std::move(items));
    }
    return v;  // ints, doubles, bools, strings, None: immutable
  }

 private:
  at::Tensor tensor(const at::Tensor& t) { return t.defined() ? copies_(t) : t; }

  detail::HostCopies copies_{/*copy_host_tensors=*/true};
};

}  // namespace

namespace detail {

at::Tensor HostCopies::operator()(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == at::kStrided, "host_snapshot: a ", t.layout(), " tensor; only dense tensors are saved");
  if (t.is_cpu() && !copy_host_) return t;
  // A lazily conjugated or negated view: its values, resolved into a copy of their own (a view of the storage
  // would drop the flag).
  if (t.is_conj() || t.is_neg()) {
    at::Tensor out = t.resolve_conj().resolve_neg().to(at::TensorOptions().device(at::kCPU), false, /*copy=*/true);
    if (t.requires_grad() && !out.requires_grad()) out.requires_grad_(true);  // (host_snapshot runs without grad)
    return out;
  }
  const at::Storage& storage = t.storage();
  auto it = copies_.find(storage.unsafeGetStorageImpl());
  if (it == copies_.end()) {
    const auto nbytes = static_cast<int64_t>(storage.nbytes());
    const at::Tensor bytes =
        at::empty({0}, t.options().dtype(at::kByte)).set_(storage, 0, {nbytes}, {1});  // the whole storage
    // A copy on the host, whichever device the storage is on (a CUDA copy waits for the stream's work).
    const at::Tensor host = bytes.to(at::TensorOptions().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true);
    it = copies_.emplace(storage.unsafeGetStorageImpl(), Copy{storage, host.storage()}).first;
  }
  at::Tensor out = at::empty({0}, t.options().device(at::kCPU).requires_grad(false))
                       .set_(it->second.copy, t.storage_offset(), t.sizes(), t.strides());
  if (t.requires_grad()) out.requires_grad_(true);
  return out;
}

}  // namespace detail

c10::IValue host_snapshot(const c10::IValue& checkpoint) {
  at::NoGradGuard no_grad;
  return Snapshot().copy(checkpoint);
}

}  // namespace ddp::train
