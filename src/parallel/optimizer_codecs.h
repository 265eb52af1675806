// How each LibTorch optimizer's settings and per-parameter state map to
// PyTorch's optimizer.state_dict() entries (internal to optimizer_state.cpp and zero.cpp).
#pragma once
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ddp::detail {

using GenericDict = c10::impl::GenericDict;

[[noreturn]] void bad_optimizer_state(const std::string& what);  // InvalidArgument, prefixed
const c10::IValue* find(const GenericDict& d, const std::string& key);
// param_groups[g][key] as a double (Python may write an int, e.g. dampening 0).
double number(const GenericDict& group, const std::string& key, size_t g, std::optional<double> fallback);
bool flag(const GenericDict& group, const std::string& key, size_t g);  // missing or None: false

struct OptimizerCodec {
  std::string name;  // Python's class name: "SGD", "Adam", "AdamW"
  // A param group's settings as Python writes them (without "params").
  std::function<GenericDict(const torch::optim::OptimizerOptions&)> write_group;
  // A parameter's state tensors, not copied (for counting memory).
  std::function<std::vector<at::Tensor>(const torch::optim::OptimizerParamState&)> tensors;
  // A parameter's state as Python writes it; an empty dict writes no entry.
  std::function<GenericDict(const torch::optim::OptimizerParamState&)> write_state;
  // Settings read from a saved group (g: its index, for messages).
  std::function<std::unique_ptr<torch::optim::OptimizerOptions>(const GenericDict&, size_t g)> read_group;
  // A parameter's state read from a saved entry (`where` names it); null: nothing to keep.
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(const GenericDict&, const std::string& where,
                                                                   const at::Tensor& param)>
      read_state;
};

// The codec for opt's type; InvalidArgument naming the supported optimizers otherwise.
const OptimizerCodec& codec_for(const torch::optim::Optimizer& opt);

}  // namespace ddp::detail
