// A torch::nn::Sequential that a Task can hold: torch::nn::AnyModule needs a forward
// that is not a template, which Sequential's is. FSDP shards it child by child
// (--strategy fsdp-full | fsdp-grad); parameters are named "0.weight", "2.bias", ...
//
//   ddp::models::SequentialNet net(torch::nn::Linear(784, 256), torch::nn::Tanh(), torch::nn::Linear(256, 10));
//   task.model = torch::nn::AnyModule(net);
#pragma once
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

namespace ddp::models {

class SequentialNetImpl : public torch::nn::SequentialImpl {
 public:
  using torch::nn::SequentialImpl::SequentialImpl;
  at::Tensor forward(const at::Tensor& x) { return torch::nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(SequentialNet);

}  // namespace ddp::models
