// SyncBatchNorm's forward and backward: PyTorch's torch/nn/modules/_functions.py
// (SyncBatchNorm). The per-rank passes over the batch are SyncBatchNormKernels'
// (ATen's fused SyncBatchNorm kernels where the device has them, CPU batch norm
// kernels elsewhere); the statistics between them are float64 [C] tensors on the
// input's device.
//
// Forward: each rank takes its per-channel mean and sum of squared deviations
// (M2) over its n_r values, all_gathers (mean, M2, n) and merges them in float64
// in rank order (Chan et al.: M2 = sum M2_r + n_r (mean_r - mean)^2), so every
// rank holds the same statistics, bit for bit, whatever the batch sizes (an
// empty batch weighs nothing, with no host read to leave it out).
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
#include "parallel/sync_batch_norm_kernels.h"

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

std::string context(const ProcessGroup& g) {
  return ErrorContext{g.backend(), g.rank(), g.size(), "SyncBatchNorm"}.prefix();
}

// weight and bias: [C], or empty without affine parameters.
struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, const SyncArgs* args) {
    ProcessGroup& g = *args->group;
    const detail::SyncBatchNormKernels k(input);
    const int64_t c = input.size(1);
    const double n = double(input.numel() / c);  // values per channel here
    // This rank's [mean, M2, n] (float64, on the input's device); an empty batch sends zeros and weighs nothing.
    at::Tensor local = at::zeros({2 * c + 1}, input.options().dtype(at::kDouble));
    if (n > 0) {
      auto [mean, var] = k.moments(input);
      local.narrow(0, 0, c).copy_(mean);
      local.narrow(0, c, c).copy_(var * n);
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
    at::Tensor y = k.normalize(input, weight, bias, mean, invstd);

    ctx->save_for_backward({input, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["count"] = total;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(args->group));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1];
    const at::Tensor mean = ctx->saved_data["mean"].toTensor(), invstd = ctx->saved_data["invstd"].toTensor();
    const at::Tensor total = ctx->saved_data["count"].toTensor();  // float64, 0-dim, on the input's device
    auto holder = c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule());
    const detail::SyncBatchNormKernels k(input);
    const int64_t c = input.size(1);
    const bool affine = weight.numel() > 0;
    auto s = k.sums(grads[0], input, weight, mean, invstd, affine && ctx->needs_input_grad(1),
                    affine && ctx->needs_input_grad(2));
    at::Tensor grad_input;
    if (ctx->needs_input_grad(0)) {
      at::Tensor sums = at::cat({s.sum_dy, s.sum_dy_xmu});
      holder->group->all_reduce(sums);
      grad_input =
          k.input_gradient(grads[0], input, weight, mean, invstd, sums.narrow(0, 0, c), sums.narrow(0, c, c), total);
    }
    return {grad_input, s.grad_weight, s.grad_bias, at::Tensor()};
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
