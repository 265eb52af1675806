// Shared by the checkpoint tests: the test model (defined identically in
// checkpoint_interop.py), temporary directories, reference tensor files that
// C++ and Python exchange without pickling, and running the Python oracle.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "ddp/train/checkpoint.h"

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddp::testing {

// A Sequential that can sit inside a Sequential (LibTorch needs a concrete forward).
struct InnerImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  at::Tensor forward(at::Tensor x) { return SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(Inner);

// Conv2d + BatchNorm2d + a nested Sequential, plus a parameter and a buffer of
// its own registered after the children (state_dict still lists them first).
struct NetImpl : torch::nn::Module {
  NetImpl();
  at::Tensor forward(at::Tensor x);
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Sequential head{nullptr};
  at::Tensor scale, shift;
};
TORCH_MODULE(Net);

// What Python's Net().state_dict().keys() lists, in order.
const std::vector<std::string>& net_keys();

// A fresh directory under the test temp dir, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Reference tensors: <stem>.txt ("name dtype ndim dims... offset nbytes" per line) and <stem>.bin (raw bytes).
using RefTensors = std::vector<std::pair<std::string, at::Tensor>>;
void write_ref(const std::string& stem, const RefTensors& tensors);
std::map<std::string, at::Tensor> read_ref(const std::string& stem);
// Same dtype, shape and bytes; a message naming the first difference, or "" if equal.
std::string bitwise_difference(const at::Tensor& got, const at::Tensor& want);

// Runs checkpoint_interop.py <args> with DDP_PYTHON (or $DDP_ORACLE_PYTHON); returns (exit status, stdout + stderr).
std::pair<int, std::string> run_oracle(const std::string& args);

// What the interop checkpoints hold beside the model and optimizer (epoch 3, step 12, the RNG state, config,
// sampler, schedule, extra), as checkpoint_interop.py's `check` expects them; `draw` gets at::rand({5}) drawn
// right after the RNG state was taken (what a reader must draw after restoring it).
train::CheckpointContents interop_contents(at::Tensor& draw);

// The message of the InvalidArgument that f throws, or "(no InvalidArgument)".
std::string error_of(const std::function<void()>& f);

}  // namespace ddp::testing
