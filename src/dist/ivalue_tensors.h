// Every tensor in a value (lists, dicts, tuples and tensor lists, nested), mapped by fn; the rest kept. The object
// collectives send tensors from the CPU (a GPU tensor pickled as it is would be loaded onto the sender's device
// index, which the receiver may not have), so receivers get CPU tensors.
//
//   c10::IValue on_cpu = map_tensors(state, [](const at::Tensor& t) { return t.cpu(); });
#pragma once
#include <ATen/core/ivalue.h>

#include <functional>

namespace ddp::detail {

c10::IValue map_tensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& fn);

}  // namespace ddp::detail
