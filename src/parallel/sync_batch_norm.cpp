// SyncBatchNorm's forward and backward: PyTorch's torch/nn/modules/_functions.py
// (SyncBatchNorm), written with CPU ATen operations (batch_norm_stats and its
// relatives are CUDA-only in LibTorch 1.13; the per-rank reductions use the CPU
// batch norm's own kernels, batch_norm_update_stats and native_batch_norm_backward).
//
// Forward: each rank takes its per-channel mean and sum of squared deviations
// (M2) over its n_r values, all_gathers (mean, M2, n) and merges them in float64
// in rank order (Chan et al.: M2 = sum M2_r + n_r (mean_r - mean)^2), so every
// rank holds the same statistics, bit for bit, whatever the batch sizes.
// Backward: the local sums of dy and dy * (x - mean) are all-reduced, and the
// input gradient is BatchNorm's over the global count N:
//   dx = (dy - sum_dy / N - (x - mean) invstd^2 sum_dy_xmu / N) invstd weight.
// weight and bias get this rank's share (sum_dy_xmu invstd, sum_dy), which DDP
// then averages, as PyTorch does.
#include "ddp/parallel/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>
#include <torch/nn/functional/batchnorm.h>

#include <vector>

#include "ddp/dist/init.h"
#include "ddp/errors.h"
#include "dist/error_context.h"

namespace ddp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the group alive in the autograd graph until backward has run.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(GroupPtr g) : group(std::move(g)) {}
  GroupPtr group;
};

struct SyncArgs {
  GroupPtr group;
  double eps, momentum;
  at::Tensor running_mean, running_var;  // undefined: not tracked
};

// float32 for 16-bit inputs (autocast); the input's type otherwise.
at::ScalarType compute_type(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

// [N, C, ...] as [N, C, L] (L = 1 for [N, C]), valid for N = 0 too.
at::Tensor as_3d(const at::Tensor& x) {
  int64_t l = 1;
  for (int64_t d = 2; d < x.dim(); ++d) l *= x.size(d);
  return x.reshape({x.size(0), x.size(1), l});
}

std::string context(const ProcessGroup& g) {
  return ErrorContext{g.backend(), g.rank(), g.size(), "SyncBatchNorm"}.prefix();
}

// weight and bias: [C], or empty without affine parameters.
struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const SyncArgs* args) {
    ProcessGroup& g = *args->group;
    const int64_t c = input.size(1);
    const at::Tensor in = input.contiguous().to(compute_type(input));
    const at::Tensor x = as_3d(in);
    const double n = double(x.size(0) * x.size(2));
    // This rank's [mean, M2, n] (ATen's per-channel kernel, float64 accumulators);
    // an empty batch sends zeros and weighs nothing.
    at::Tensor local = at::zeros({2 * c + 1}, input.options().dtype(at::kDouble));  // on the input's device
    if (n > 0) {
      auto [mean, var] = at::batch_norm_update_stats(in, {}, {}, 0.0);  // var: biased
      local.narrow(0, 0, c).copy_(mean);
      local.narrow(0, c, c).copy_(var.to(at::kDouble) * n);
      local[2 * c] = n;
    }
    std::vector<at::Tensor> gathered(g.size());
    for (auto& t : gathered) t = at::empty_like(local);
    g.all_gather(gathered, local);
    at::Tensor all = at::stack(gathered);  // [W, 2C + 1], rank order: the same sums everywhere
    at::Tensor counts = all.narrow(1, 2 * c, 1), means = all.narrow(1, 0, c), m2s = all.narrow(1, c, c);
    // The count stays on the device (no wait for a GPU); read only where this rank's own values cannot make
    // it more than 1, so every rank reads it when it is too small, and all throw.
    const at::Tensor total = counts.sum();
    if (n <= 1 && total.item<double>() <= 1)
      throw InvalidArgument(context(g) + "expected more than 1 value per channel when training, got " +
                            std::to_string(int64_t(total.item<double>())) + " over all ranks (input size " +
                            c10::str(input.sizes()) + " here)");
    at::Tensor mean = (means * counts).sum(0) / total;
    at::Tensor m2 = (m2s + counts * (means - mean).square()).sum(0);
    at::Tensor invstd = (m2 / total + args->eps).rsqrt();
    if (args->running_mean.defined()) {
      const double m = args->momentum;
      args->running_mean.copy_(args->running_mean.to(at::kDouble) * (1 - m) + mean * m);
      args->running_var.copy_(args->running_var.to(at::kDouble) * (1 - m) + m2 / (total - 1) * m);
    }
    // y = x * scale + shift per channel, as ATen's batch norm applies it.
    at::Tensor scale = weight.numel() ? invstd * weight.to(at::kDouble) : invstd;
    at::Tensor shift = -mean * scale;
    if (bias.numel()) shift = shift + bias.to(at::kDouble);
    auto per_channel = [&](const at::Tensor& k) { return k.to(x.scalar_type()).view({1, c, 1}); };
    at::Tensor y = at::addcmul(per_channel(shift), x, per_channel(scale));

    ctx->save_for_backward({input, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["count"] = total;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(args->group));
    return y.view(input.sizes()).to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1];
    const at::Tensor mean = ctx->saved_data["mean"].toTensor(), invstd = ctx->saved_data["invstd"].toTensor();
    const at::Tensor total = ctx->saved_data["count"].toTensor();  // float64, 0-dim, on the input's device
    auto holder = c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule());
    const int64_t c = input.size(1);
    const at::ScalarType type = compute_type(input);
    const at::Tensor in = input.contiguous().to(type), dy_in = grads[0].contiguous().to(type);
    const at::Tensor x = as_3d(in), dy = as_3d(dy_in);
    const at::Tensor mean_t = mean.to(type), invstd_t = invstd.to(type);
    // This rank's sums of dy and dy (x - mean) (zero for an empty batch): ATen's
    // per-channel kernel, which returns them as grad_bias and grad_weight = sum_dy_xmu invstd.
    at::Tensor sum_dy = at::zeros({c}, in.options().dtype(at::kDouble)), sum_dy_x_hat = at::zeros_like(sum_dy);
    if (x.numel() > 0) {
      auto sums = at::native_batch_norm_backward(dy_in, in, at::ones({c}, in.options()), {}, {}, mean_t, invstd_t,
                                                 /*train=*/true, 0.0, {false, true, true});
      sum_dy_x_hat = std::get<1>(sums).to(at::kDouble);
      sum_dy = std::get<2>(sums).to(at::kDouble);
    }
    const at::Tensor sum_dy_xmu = sum_dy_x_hat / invstd_t.to(at::kDouble);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (weight.numel() && ctx->needs_input_grad(1)) grad_weight = sum_dy_x_hat.to(weight.scalar_type());
    if (weight.numel() && ctx->needs_input_grad(2)) grad_bias = sum_dy.to(weight.scalar_type());
    if (ctx->needs_input_grad(0)) {
      at::Tensor sums = at::cat({sum_dy, sum_dy_xmu});
      holder->group->all_reduce(sums);
      const at::Tensor w = weight.numel() ? weight.to(at::kDouble) : at::ones_like(invstd);
      // dx = dy * (invstd w) + (x - mean) * (-invstd^3 w sum_dy_xmu / N) - invstd w sum_dy / N
      at::Tensor k_dy = invstd * w;
      at::Tensor k_xmu = -invstd.pow(3) * w * sums.narrow(0, c, c) / total;
      at::Tensor k_0 = -k_dy * sums.narrow(0, 0, c) / total;
      auto per_channel = [&](const at::Tensor& k) { return k.to(type).view({1, c, 1}); };
      grad_input = at::addcmul(per_channel(k_0), dy, per_channel(k_dy));
      grad_input.addcmul_(x - mean_t.view({1, c, 1}), per_channel(k_xmu));
      grad_input = grad_input.view(input.sizes()).to(input.scalar_type());
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options_, GroupPtr group_)
    : options(options_), group(std::move(group_)) {
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  if (c <= 0) throw InvalidArgument("SyncBatchNorm: num_features must be positive, got " + std::to_string(c));
  const bool affine = options.affine(), track = options.track_running_stats();
  adopt(affine ? at::ones({c}).requires_grad_() : at::Tensor(), affine ? at::zeros({c}).requires_grad_() : at::Tensor(),
        track ? at::zeros({c}) : at::Tensor(), track ? at::ones({c}) : at::Tensor(),
        track ? at::zeros({}, at::kLong) : at::Tensor());
}

void SyncBatchNormImpl::adopt(const at::Tensor& w, const at::Tensor& b, const at::Tensor& mean, const at::Tensor& var,
                              const at::Tensor& count) {
  weight = register_parameter("weight", w, w.defined() && w.requires_grad());
  bias = register_parameter("bias", b, b.defined() && b.requires_grad());
  running_mean = register_buffer("running_mean", mean);
  running_var = register_buffer("running_var", var);
  num_batches_tracked = register_buffer("num_batches_tracked", count);
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  at::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  at::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2)
    throw InvalidArgument("SyncBatchNorm: expected at least 2D input (got " + std::to_string(input.dim()) + "D input)");
  if (input.size(1) != options.num_features())
    throw InvalidArgument("SyncBatchNorm: expected " + std::to_string(options.num_features()) +
                          " channels (dimension 1), got input of size " + c10::str(input.sizes()));
  // BatchNormImplBase::forward's bookkeeping, step for step.
  double factor = options.momentum() ? *options.momentum() : 0.0;
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  GroupPtr g;
  if (is_training()) g = group ? group : default_group();
  if (!g || g->size() == 1)
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     is_training() || !options.track_running_stats(), factor,
                                                     options.eps());
  SyncArgs args{g, options.eps(), factor, running_mean, running_var};
  // Autograd functions take defined tensors only: without affine parameters, empty ones.
  const at::Tensor none = at::empty({0});
  return SyncBatchNormFunction::apply(input, weight.defined() ? weight : none, bias.defined() ? bias : none, &args);
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "ddp::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum())
    stream << *options.momentum();
  else
    stream << "None";
  stream << ", affine=" << std::boolalpha << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

}  // namespace ddp
