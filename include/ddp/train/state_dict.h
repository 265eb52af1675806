// PyTorch-compatible state dicts: a module's tensors by name, in the order of
// Python's model.state_dict(), saved in files Python's torch.load() reads and
// loaded from files Python's torch.save() wrote (OrderedDicts included).
//
//   ddp::train::save_state_dict(ddp::train::state_dict(*net), "net.pt");
//   // Python: model.load_state_dict(torch.load("net.pt"))
//   auto sd = ddp::train::load_state_dict_file("from_python.pt");  // torch.save(model.state_dict(), ...)
//   ddp::train::load_state_dict(*net, sd);                          // "module." prefixes (DDP) stripped
//
// Files are torch.save's zip format. save_state_dict writes a
// collections.OrderedDict that torch.load(..., weights_only=True) accepts;
// load_state_dict_file reads what LibTorch 1.13's own unpickler cannot
// (OrderedDicts, one-item dicts and lists, wide ints; see docs/checkpoints.md).
//
// Errors: ddp::InvalidArgument for keys, shapes or dtypes that do not fit the
// module; ddp::Error for files that cannot be read or written.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

namespace ddp::train {

// Ordered (name, tensor) pairs, in PyTorch's state_dict order: for each module depth-first, its own parameters,
// then its own buffers (BatchNorm: weight, bias, running_mean, running_var, num_batches_tracked), then its children.
using StateDict = std::vector<std::pair<std::string, at::Tensor>>;
StateDict state_dict(const torch::nn::Module& module);  // tensors detached (sharing storage is fine)
// Copies values in (no autograd). strict: every key of the module must be present and no extra key; shapes and
// dtypes must match; errors (ddp::InvalidArgument) name the missing/unexpected keys (first few + count) and mismatches.
// A "module." prefix on every key (saved from a DDP model) is stripped automatically.
void load_state_dict(torch::nn::Module& module, const StateDict& sd, bool strict = true);
// A file torch.load() reads as a dict of tensors (name -> tensor), in order (an OrderedDict if you can emit one, else a
// plain dict). We emit a collections.OrderedDict, using only globals torch.load(weights_only=True) allows; written
// atomically (see save_atomic).
void save_state_dict(const StateDict& sd, const std::string& path);
// Reads a file written by save_state_dict, by Python's torch.save(model.state_dict()) (an OrderedDict, possibly with
// "module." prefixes), by torch.save of a plain dict, or a checkpoint file whose "model" entry is a state dict.
StateDict load_state_dict_file(const std::string& path);

// --- Additions ---

// The state dict as a c10::Dict<std::string, Tensor> (a checkpoint's "model" entry). Dicts of that type are
// written as OrderedDicts.
c10::IValue state_dict_to_ivalue(const StateDict& sd);
// The reverse: a dict whose keys are strings and values tensors. `where` (a file, a checkpoint key) starts the
// ddp::InvalidArgument message for anything else.
StateDict state_dict_from_ivalue(const c10::IValue& value, const std::string& where);

}  // namespace ddp::train
