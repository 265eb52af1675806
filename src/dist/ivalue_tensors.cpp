#include "dist/ivalue_tensors.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include <vector>

namespace ddp::detail {

c10::IValue map_tensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (v.isTensor()) return fn(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) out.push_back(fn(t));
    return out;
  }
  if (v.isList()) {
    c10::impl::GenericList in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (const c10::IValue& e : in) out.push_back(map_tensors(e, fn));
    return out;
  }
  if (v.isGenericDict()) {
    c10::impl::GenericDict in = v.toGenericDict();
    c10::impl::GenericDict out(in.keyType(), in.valueType());
    for (const auto& item : in) out.insert(item.key(), map_tensors(item.value(), fn));
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& e : v.toTupleRef().elements()) elements.push_back(map_tensors(e, fn));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return v;
}

}  // namespace ddp::detail
