// SyncBatchNorm's per-rank work, between its collectives: this rank's moments, the normalization with the global
// statistics, this rank's sums for backward and the input gradient. Two ways, chosen by what ATen has for the
// input's device (`fused`), never by the device's name:
// - fused: ATen's SyncBatchNorm kernels (batch_norm_elemt, batch_norm_backward_reduce, batch_norm_backward_elemt:
//   CUDA's), called as PyTorch's SyncBatchNorm calls them: one pass each, on the input as it is (16-bit, channels
//   last), statistics in its accumulation type;
// - composite: ATen's CPU batch norm kernels and elementwise operations on a contiguous [N, C, L] view in float32
//   (float64 for float64 inputs).
// Statistics cross these functions in float64, as [C] tensors on the input's device; nothing is read on the host.
#pragma once
#include <ATen/ATen.h>

namespace ddp::detail {

class SyncBatchNormKernels {
 public:
  // The way for `input` (its device's kernels), for the forward and the backward of one call.
  explicit SyncBatchNormKernels(const at::Tensor& input);
  // The way given (tests comparing the two where both exist).
  SyncBatchNormKernels(const at::Tensor& input, bool fused);
  bool fused() const { return fused_; }

  // This rank's per-channel mean and biased variance (float64) over a non-empty input.
  std::pair<at::Tensor, at::Tensor> moments(const at::Tensor& input) const;
  // (x - mean) invstd weight + bias, in the input's dtype; weight, bias: [C] or empty (no affine parameters).
  at::Tensor normalize(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                       const at::Tensor& mean, const at::Tensor& invstd) const;

  // This rank's sums of dy and dy (x - mean) (float64, zeros for an empty input), and its shares of the weight's
  // and the bias's gradients (sum dy (x - mean) invstd, sum dy; in the weight's dtype, where asked for).
  struct Sums {
    at::Tensor sum_dy, sum_dy_xmu, grad_weight, grad_bias;
  };
  Sums sums(const at::Tensor& dy, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& mean,
            const at::Tensor& invstd, bool want_weight, bool want_bias) const;
  // BatchNorm's input gradient over the global count `total` (a 0-dim float64), from the global sums:
  //   dx = (dy - sum_dy / N - (x - mean) invstd^2 sum_dy_xmu / N) invstd weight.
  at::Tensor input_gradient(const at::Tensor& dy, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& mean, const at::Tensor& invstd, const at::Tensor& sum_dy,
                            const at::Tensor& sum_dy_xmu, const at::Tensor& total) const;

  // Where the input must be laid out for the fused kernels (contiguous, or channels last as it is).
  static at::Tensor laid_out(const at::Tensor& t);

 private:
  bool fused_;
  at::ScalarType acc_;  // float32 for 16-bit inputs, the input's type otherwise
};

}  // namespace ddp::detail
