#include "ddp/train/evaluate.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "ddp/data/distributed_sampler.h"
#include "ddp/errors.h"

namespace ddp::train {

at::Tensor tta_logits(const std::function<at::Tensor(const at::Tensor&)>& net, const at::Tensor& x, Tta tta) {
  if (tta == Tta::kNone) return net(x);
  auto mirrored = [&](const at::Tensor& v) { return (net(v) + net(v.flip(3))) / 2; };
  at::Tensor logits = mirrored(x);
  if (tta == Tta::kFlip) return logits;
  const int64_t h = x.size(2), w = x.size(3);
  at::Tensor padded = at::reflection_pad2d(x, {1, 1, 1, 1});
  at::Tensor up_left = padded.slice(2, 0, h).slice(3, 0, w), down_right = padded.slice(2, 2, h + 2).slice(3, 2, w + 2);
  return (logits + (mirrored(up_left) + mirrored(down_right)) / 2) / 2;
}

EvalForward with_tta(Tta each, Tta final) {
  final = std::max(each, final);
  return [each, final](const Forward& net, const at::Tensor& x, bool last) {
    return tta_logits(net, x, last ? final : each);
  };
}

at::Tensor exact_shard(int64_t n, const ProcessGroup& group) {
  DistributedSamplerOptions o;
  o.num_replicas = group.size();
  o.rank = group.rank();
  o.shuffle = false;
  o.exact = true;
  auto idx = DistributedSampler(static_cast<size_t>(n), o).indices();
  return at::tensor(std::vector<int64_t>(idx.begin(), idx.end()), at::kLong);
}

EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward, const at::Tensor& x,
                    const at::Tensor& y, int64_t batch_size, ProcessGroup& group, const EvalOptions& options) {
  if (batch_size < 1) throw InvalidArgument("evaluate: batch_size must be >= 1");
  if (x.size(0) != y.size(0))
    throw InvalidArgument("evaluate: " + std::to_string(x.size(0)) + " inputs but " + std::to_string(y.size(0)) +
                          " labels");
  int64_t start = 0;
  return evaluate_batches(
      forward,
      [&]() -> std::optional<data::Batch> {
        if (start >= x.size(0)) return std::nullopt;
        const int64_t len = std::min(batch_size, x.size(0) - start);
        data::Batch b{x.narrow(0, start, len), y.narrow(0, start, len)};
        start += len;
        return b;
      },
      group, options);
}

bool is_classification(const at::Tensor& output, const at::Tensor& target) {
  return output.dim() == 2 && target.dim() == 1 && at::isIntegralType(target.scalar_type(), /*includeBool=*/false);
}

EvalResult evaluate_batches(const std::function<at::Tensor(const at::Tensor&)>& forward,
                            const std::function<std::optional<data::Batch>()>& next, ProcessGroup& group,
                            const EvalOptions& options) {
  at::NoGradGuard no_grad;
  // loss sum, top-1 hits, top-5 hits, samples, batches that were not classification, then each metric's sum:
  // exact integers in float64 up to 2^53.
  const size_t m = options.metrics.size();
  std::vector<double> sums(5 + m, 0.0);
  while (auto batch = next()) {
    at::Tensor logits = forward(batch->data).to(at::kFloat);
    const at::Tensor target = batch->target.to(logits.device());  // a forward may answer on its GPU
    const double n = static_cast<double>(target.size(0));
    if (options.loss)
      sums[0] += options.loss(logits, target).item<double>() * n;
    else
      sums[0] += at::cross_entropy_loss(logits, target, {}, at::Reduction::Sum).item<double>();
    if (is_classification(logits, target)) {
      const int64_t k = std::min<int64_t>(5, logits.size(1));
      at::Tensor top = std::get<1>(logits.topk(k, 1));
      at::Tensor hit = top.eq(target.unsqueeze(1));
      sums[1] += hit.select(1, 0).sum().item<double>();
      sums[2] += hit.any(1).sum().item<double>();
    } else {
      sums[4] += 1;
    }
    sums[3] += n;
    for (size_t i = 0; i < m; ++i) {
      at::Tensor s = options.metrics[i].sum(logits, target);
      if (s.numel() != 1)
        throw InvalidArgument("evaluate: metric '" + options.metrics[i].name + "' gave " + std::to_string(s.numel()) +
                              " values for a batch; it must return the batch's sum, one value");
      sums[5 + i] += s.item<double>();
    }
  }
  at::Tensor t = at::tensor(sums, at::kDouble);
  group.all_reduce(t).wait();  // synchronous unless opts.async_op
  auto a = t.accessor<double, 1>();
  EvalResult r;
  r.count = static_cast<int64_t>(a[3]);
  r.has_accuracy = a[4] == 0;
  for (size_t i = 0; i < m; ++i) r.metrics.emplace_back(options.metrics[i].name, r.count > 0 ? a[5 + i] / a[3] : 0.0);
  if (r.count > 0) {
    r.loss = a[0] / a[3];
    if (r.has_accuracy) {
      r.acc1 = a[1] / a[3];
      r.acc5 = a[2] / a[3];
    }
  }
  return r;
}

}  // namespace ddp::train
