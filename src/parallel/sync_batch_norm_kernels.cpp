#include "parallel/sync_batch_norm_kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

namespace ddp::detail {
namespace {

// Whether ATen has a kernel of its own for each of SyncBatchNorm's fused operations on t's device (CUDA's; not
// the CPU's, nor meta's). The operators are looked up once; their kernels, at each call (a test may add some).
bool has_fused_kernels(const at::Tensor& t) {
  static const std::vector<c10::optional<c10::OperatorHandle>> ops = [] {
    std::vector<c10::optional<c10::OperatorHandle>> found;
    for (const char* name :
         {"aten::batch_norm_elemt", "aten::batch_norm_backward_reduce", "aten::batch_norm_backward_elemt"})
      found.push_back(c10::Dispatcher::singleton().findOp(c10::OperatorName(name, "")));
    return found;
  }();
  const c10::DispatchKey key = c10::legacyExtractDispatchKey(t.key_set());
  for (const auto& op : ops)
    if (!op || !op->hasKernelForDispatchKey(key)) return false;
  return true;
}

// [N, C, ...] as [N, C, L] (L = 1 for [N, C]), valid for N = 0 too.
at::Tensor as_3d(const at::Tensor& x) {
  int64_t l = 1;
  for (int64_t d = 2; d < x.dim(); ++d) l *= x.size(d);
  return x.reshape({x.size(0), x.size(1), l});
}

// A per-channel [C] tensor as a factor of a [N, C, L] one, in type t.
at::Tensor per_channel(const at::Tensor& k, at::ScalarType t) { return k.to(t).view({1, k.size(0), 1}); }

// The gradient in the input's dtype and layout (channels last where the input is: CUDA's fast kernels need both).
at::Tensor like(const at::Tensor& dy, const at::Tensor& input) {
  const at::Tensor in = SyncBatchNormKernels::laid_out(input);
  return dy.to(in.scalar_type()).contiguous(in.suggest_memory_format());
}

c10::optional<at::Tensor> affine(const at::Tensor& p, at::ScalarType t) {
  if (!p.numel()) return c10::nullopt;
  return p.to(t);
}

}  // namespace

SyncBatchNormKernels::SyncBatchNormKernels(const at::Tensor& input)
    : SyncBatchNormKernels(input, has_fused_kernels(input)) {}

SyncBatchNormKernels::SyncBatchNormKernels(const at::Tensor& input, bool fused) : fused_(fused) {
  const at::ScalarType t = input.scalar_type();
  acc_ = t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

at::Tensor SyncBatchNormKernels::laid_out(const at::Tensor& t) {
  if (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t;
  if (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d)) return t;
  return t.contiguous();
}

std::pair<at::Tensor, at::Tensor> SyncBatchNormKernels::moments(const at::Tensor& input) const {
  const at::Tensor in = fused_ ? laid_out(input) : input.contiguous().to(acc_);
  auto [mean, var] = at::batch_norm_update_stats(in, {}, {}, 0.0);  // var: biased
  return {mean.to(at::kDouble), var.to(at::kDouble)};
}

at::Tensor SyncBatchNormKernels::normalize(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                                           const at::Tensor& mean, const at::Tensor& invstd) const {
  if (fused_) {
    const at::Tensor in = laid_out(input);
    if (in.numel() == 0) return at::empty_like(in);
    // eps is unused by the kernel: invstd is given.
    return at::batch_norm_elemt(in, affine(weight, acc_), affine(bias, acc_), mean.to(acc_), invstd.to(acc_), 0.0);
  }
  // y = x * scale + shift per channel, as ATen's batch norm applies it.
  const at::Tensor x = as_3d(input.contiguous().to(acc_));
  at::Tensor scale = weight.numel() ? invstd * weight.to(at::kDouble) : invstd;
  at::Tensor shift = -mean * scale;
  if (bias.numel()) shift = shift + bias.to(at::kDouble);
  return at::addcmul(per_channel(shift, acc_), x, per_channel(scale, acc_)).view(input.sizes()).to(input.scalar_type());
}

SyncBatchNormKernels::Sums SyncBatchNormKernels::sums(const at::Tensor& dy, const at::Tensor& input,
                                                      const at::Tensor& weight, const at::Tensor& mean,
                                                      const at::Tensor& invstd, bool want_weight,
                                                      bool want_bias) const {
  const int64_t c = input.size(1);
  Sums s;
  s.sum_dy = at::zeros({c}, input.options().dtype(at::kDouble));
  s.sum_dy_xmu = at::zeros_like(s.sum_dy);
  at::Tensor sum_dy_x_hat = at::zeros_like(s.sum_dy);  // sum dy (x - mean) invstd
  if (input.numel() > 0 && fused_) {
    auto r = at::batch_norm_backward_reduce(like(dy, input), laid_out(input), mean.to(acc_), invstd.to(acc_),
                                            affine(weight, acc_), true, want_weight, want_bias);
    s.sum_dy = std::get<0>(r).to(at::kDouble);
    s.sum_dy_xmu = std::get<1>(r).to(at::kDouble);
    if (want_weight) s.grad_weight = std::get<2>(r).to(weight.scalar_type());
    if (want_bias) s.grad_bias = std::get<3>(r).to(weight.scalar_type());
    return s;
  }
  if (input.numel() > 0) {
    // ATen's per-channel kernel returns the sums as grad_bias and grad_weight = sum dy (x - mean) invstd.
    const at::Tensor in = input.contiguous().to(acc_);
    auto r = at::native_batch_norm_backward(dy.contiguous().to(acc_), in, at::ones({c}, in.options()), {}, {},
                                            mean.to(acc_), invstd.to(acc_), /*train=*/true, 0.0, {false, true, true});
    sum_dy_x_hat = std::get<1>(r).to(at::kDouble);
    s.sum_dy = std::get<2>(r).to(at::kDouble);
    s.sum_dy_xmu = sum_dy_x_hat / invstd.to(acc_).to(at::kDouble);  // the invstd the kernel used
  }
  if (want_weight) s.grad_weight = sum_dy_x_hat.to(weight.scalar_type());
  if (want_bias) s.grad_bias = s.sum_dy.to(weight.scalar_type());
  return s;
}

at::Tensor SyncBatchNormKernels::input_gradient(const at::Tensor& dy, const at::Tensor& input, const at::Tensor& weight,
                                                const at::Tensor& mean, const at::Tensor& invstd,
                                                const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu,
                                                const at::Tensor& total) const {
  if (fused_) {
    const at::Tensor in = laid_out(input);
    if (in.numel() == 0) return at::empty_like(in);
    return at::batch_norm_backward_elemt(like(dy, input), in, mean.to(acc_), invstd.to(acc_), affine(weight, acc_),
                                         sum_dy.to(acc_), sum_dy_xmu.to(acc_), total.to(at::kInt).reshape({1}));
  }
  const at::Tensor x = as_3d(input.contiguous().to(acc_)), g = as_3d(dy.contiguous().to(acc_));
  const at::Tensor w = weight.numel() ? weight.to(at::kDouble) : at::ones_like(invstd);
  // dx = dy * (invstd w) + (x - mean) * (-invstd^3 w sum_dy_xmu / N) - invstd w sum_dy / N
  const at::Tensor k_dy = invstd * w;
  const at::Tensor k_xmu = -invstd.pow(3) * w * sum_dy_xmu / total;
  const at::Tensor k_0 = -k_dy * sum_dy / total;
  at::Tensor dx = at::addcmul(per_channel(k_0, acc_), g, per_channel(k_dy, acc_));
  dx.addcmul_(x - per_channel(mean, acc_), per_channel(k_xmu, acc_));
  return dx.view(input.sizes()).to(input.scalar_type());
}

}  // namespace ddp::detail
