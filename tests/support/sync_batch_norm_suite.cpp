// SyncBatchNorm's cases of the DDP suite (ddp_suite.h): on every rank, the
// layer against BatchNorm applied to the global batch, forward and backward, with
// uneven per-rank batches (rank 2's is empty); and FashionCNN, converted and
// wrapped in DDP, against one process on the global batch.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "ddp/errors.h"
#include "ddp/parallel/consistency.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/train/models/fashion_cnn.h"
#include "support/ddp_suite.h"

namespace ddp::testing {
namespace {

// Samples per rank: uneven, none on rank 2 (worlds 3 and 4).
constexpr int64_t kSizes[] = {3, 5, 0, 2};
int64_t offset(int rank) {
  int64_t s = 0;
  for (int q = 0; q < rank; ++q) s += kSizes[q];
  return s;
}

double max_abs(const at::Tensor& t) { return t.numel() ? t.abs().max().item<double>() : 0.0; }

// The tolerance. Every compared value is a float32 function of per-channel sums
// over the M values of a channel in the global batch (mean, the squared
// deviations, sum dy, sum dy (x - mean)) followed by a few elementwise
// operations. BatchNorm sums in one order, SyncBatchNorm per rank and then
// across ranks (in float64 there): a sum of M terms in any order is within
// gamma_M = M u / (1 - M u) (u = 2^-24) of the exact one, relative to the sum of
// the terms' magnitudes, so the two differ by at most 2 gamma_M of it; each
// elementwise step adds a few u, and a quantity built from two such sums
// (dx from sum dy and sum dy (x - mean)) doubles it again. Hence
// |ours - BatchNorm's| <= 8 M u S, S the magnitude that the quantity's terms
// sum to (derived at each check below). Statistics of the local batch instead
// of the global one are off by O(S), orders of magnitude beyond: each case checks it.
double bound(int64_t m, double scale) { return 8.0 * double(m) * std::ldexp(1.0, -24) * scale; }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() ? (a.to(at::kDouble).cpu() - b.to(at::kDouble).cpu()).abs().max().item<double>() : 0.0;
}

void expect_within(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  if (!got.sizes().equals(want.sizes())) {
    ADD_FAILURE() << what << ": size " << got.sizes() << ", expected " << want.sizes();
    return;
  }
  const double d = max_diff(got, want);
  EXPECT_LE(d, tol) << what << ": off by " << d << ", more than the bound " << tol;
}

// One BatchNorm layer (BN: BatchNorm1d/2d/3d) with input [N, C, spatial...] (channels last where asked):
// two training steps, then evaluation. SyncBatchNorm runs on the group's device (a GPU for nccl), the
// reference BatchNorm on the CPU.
template <typename BN>
void layer_case(ProcessGroup& g, const torch::nn::BatchNormOptions& opts, std::vector<int64_t> spatial,
                const std::string& name, bool channels_last = false) {
  const at::Device dev = g.device();
  auto laid_out = [&](const at::Tensor& t) { return channels_last ? t.contiguous(at::MemoryFormat::ChannelsLast) : t; };
  const int r = g.rank(), w = g.size();
  const int64_t n = kSizes[r], start = offset(r), total = offset(w), c = opts.num_features();
  int64_t per_sample = 1;
  for (int64_t s : spatial) per_sample *= s;
  const int64_t m = total * per_sample;                     // values per channel, global batch
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);  // the same stream on every rank
  BN ref(opts), plain(opts);
  {
    at::NoGradGuard no_grad;  // non-trivial affine parameters and statistics
    for (auto* bn : {&ref, &plain}) {
      auto g2 = at::make_generator<at::CPUGeneratorImpl>(5);
      if (opts.affine()) {
        (*bn)->weight.copy_(at::rand({c}, g2) + 0.5);
        (*bn)->bias.copy_(at::randn({c}, g2));
      }
      if (opts.track_running_stats()) {
        (*bn)->running_mean.copy_(at::randn({c}, g2));
        (*bn)->running_var.copy_(at::rand({c}, g2) + 0.5);
      }
    }
  }
  auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(convert_sync_batchnorm(plain.ptr(), handle(g)));
  if (!sync) return ADD_FAILURE() << tag(g, name) << ": convert_sync_batchnorm did not return a SyncBatchNorm";
  sync->to(dev);
  std::vector<int64_t> dims = {0};  // every dimension but the channels'
  for (size_t d = 0; d < spatial.size(); ++d) dims.push_back(int64_t(d) + 2);
  for (int step = 0; step < 2; ++step) {
    const std::string what = tag(g, name + ", step " + std::to_string(step));
    std::vector<int64_t> shape = {total, c};
    shape.insert(shape.end(), spatial.begin(), spatial.end());
    at::Tensor x_all = at::randn(shape, gen) * 2 + 0.5, dy_all = at::randn(shape, gen);
    at::Tensor x = laid_out(x_all.narrow(0, start, n).to(dev)).clone().requires_grad_(true);
    at::Tensor y = sync->forward(x);
    (y * laid_out(dy_all.narrow(0, start, n).to(dev))).sum().backward();
    at::Tensor x_ref = x_all.clone().requires_grad_(true);
    at::Tensor y_ref = ref->forward(x_ref);
    (y_ref * dy_all).sum().backward();

    // The magnitudes S of each quantity's terms (see bound()).
    std::vector<int64_t> channel_shape(shape.size(), 1);
    channel_shape[1] = c;
    at::Tensor mean = x_all.mean(dims), var = x_all.var(dims, /*unbiased=*/false);
    at::Tensor invstd = (var + opts.eps()).rsqrt();
    const double xmax = max_abs(x_all), dymax = max_abs(dy_all), inv = max_abs(invstd);
    const double z = max_abs((x_all - mean.view(channel_shape)) * invstd.view(channel_shape));  // |x hat|
    const double wmax = opts.affine() ? max_abs(ref->weight) : 1.0, bmax = opts.affine() ? max_abs(ref->bias) : 0.0;
    const double y_tol = bound(m, (xmax * inv + z) * wmax + bmax);
    expect_within(y, y_ref.narrow(0, start, n), y_tol, what + ": output");
    // dx = (dy - mean(dy) - x_hat mean(dy x_hat)) invstd w
    expect_within(x.grad(), x_ref.grad().narrow(0, start, n), bound(m, 2 * inv * wmax * dymax * (2 + z * z)),
                  what + ": input gradient");
    if (opts.affine()) {  // each rank's share; their sum is the global gradient
      at::Tensor gw = sync->weight.grad().clone(), gb = sync->bias.grad().clone();
      g.all_reduce(gw);
      g.all_reduce(gb);
      expect_within(gw, ref->weight.grad(), bound(m, double(m) * dymax * z), what + ": weight gradient");
      expect_within(gb, ref->bias.grad(), bound(m, double(m) * dymax), what + ": bias gradient");
      for (auto* p : {&sync->weight, &sync->bias, &ref->weight, &ref->bias}) p->mutable_grad().zero_();
    }
    if (opts.track_running_stats()) {  // momentum blends of the mean and the unbiased variance
      expect_within(sync->running_mean, ref->running_mean, bound(m, xmax), what + ": running_mean");
      expect_within(sync->running_var, ref->running_var, bound(m, max_abs(x_all.var(dims, true))),
                    what + ": running_var");
      EXPECT_TRUE(at::equal(sync->num_batches_tracked.cpu(), ref->num_batches_tracked))
          << what << ": num_batches_tracked";
    }
    // Negative control: this rank's own statistics are far off.
    if (w > 1 && n * per_sample > 1) {
      at::NoGradGuard no_grad;
      at::Tensor local = at::batch_norm(x, sync->weight, sync->bias, {}, {}, true, 0.0, opts.eps(), false);
      EXPECT_GT(max_diff(local, y_ref.narrow(0, start, n)), 100 * y_tol) << what << ": the check cannot tell";
    }
  }
  // Evaluation is BatchNorm's on the same device, bit for bit, and starts no collective: on rank 0 only.
  sync->eval();
  if (r == 0) {
    at::NoGradGuard no_grad;
    BN twin(opts);
    twin->to(dev);
    twin->eval();
    auto from = sync->named_parameters(), to = twin->named_parameters();
    for (const auto& p : from)
      if (p.value().defined()) to[p.key()].copy_(p.value());
    auto from_b = sync->named_buffers(), to_b = twin->named_buffers();
    for (const auto& b : from_b) to_b[b.key()].copy_(b.value());
    std::vector<int64_t> shape = {4, c};
    shape.insert(shape.end(), spatial.begin(), spatial.end());
    at::Tensor x = laid_out(at::randn(shape, gen).to(dev));
    EXPECT_TRUE(at::equal(sync->forward(x), twin->forward(x))) << tag(g, name + ": evaluation");
  }
  at::Tensor t = at::ones({1}, at::TensorOptions().device(dev));
  g.all_reduce(t);
  EXPECT_EQ(t.item<float>(), float(w)) << tag(g, name + ": collectives out of step after evaluation");
}

void sync_batch_norm_layers(ProcessGroup& g) {
  using torch::nn::BatchNormOptions;
  layer_case<torch::nn::BatchNorm1d>(g, BatchNormOptions(4), {}, "BatchNorm1d [N, 4]");
  layer_case<torch::nn::BatchNorm1d>(g, BatchNormOptions(3).momentum(0.3), {5}, "BatchNorm1d [N, 3, 5], momentum 0.3");
  layer_case<torch::nn::BatchNorm2d>(g, BatchNormOptions(3).momentum(c10::nullopt), {2, 3},
                                     "BatchNorm2d [N, 3, 2, 3], cumulative average");
  layer_case<torch::nn::BatchNorm2d>(g, BatchNormOptions(2).track_running_stats(false), {3, 2},
                                     "BatchNorm2d [N, 2, 3, 2], no running statistics");
  layer_case<torch::nn::BatchNorm3d>(g, BatchNormOptions(2).affine(false), {2, 2, 2},
                                     "BatchNorm3d [N, 2, 2, 2, 2], no affine");
  layer_case<torch::nn::BatchNorm2d>(g, BatchNormOptions(3), {2, 3}, "BatchNorm2d [N, 3, 2, 3], channels last",
                                     /*channels_last=*/true);
}

// Fewer than two values per channel over all ranks: every rank refuses, alike.
void sync_batch_norm_too_few_values(ProcessGroup& g) {
  if (g.size() == 1) return;  // BatchNorm's own check
  SyncBatchNorm bn(torch::nn::BatchNormOptions(3), handle(g));
  try {
    bn(at::ones({g.rank() == 0 ? 1 : 0, 3}));
    ADD_FAILURE() << tag(g, "expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) +
                                         " SyncBatchNorm: expected more than 1 value per channel when training, "
                                         "got 1 over all ranks"),
              std::string::npos)
        << e.what();
  }
  at::Tensor t = at::ones({1});
  g.all_reduce(t);
  EXPECT_EQ(t.item<float>(), float(g.size())) << tag(g, "collectives out of step");
}

// FashionCNN (dropout off), its BatchNorms converted, under DDP with uneven
// batches: each rank's loss is W / N times its summed cross-entropy (DDP averages
// over W ranks), so the gradients are those of the mean loss over the global batch
// of N, which one plain FashionCNN computes for reference. Two SGD steps.
models::FashionCNN fashion_cnn(uint64_t seed) {
  static std::mutex mu;  // ranks may be threads sharing the global generator
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  models::FashionCNN net;
  net->named_children()["drop"]->eval();
  return net;
}

void sync_batch_norm_fashion_cnn(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const int64_t n = kSizes[r], start = offset(r), total = offset(w);
  auto net = fashion_cnn(7 + r), ref = fashion_cnn(7);  // DDP broadcasts rank 0's weights
  convert_sync_batchnorm(net.ptr(), handle(g));
  const at::Device dev = g.device();  // the group's (a GPU for nccl); the reference on the CPU
  // On a GPU the convolutions round otherwise than the CPU reference's, element by element, so a 2x2 max-pool
  // window whose two largest values lie within that rounding may pick another winner (a gradient moved by a few
  // percent): in float64 such ties are about 1e9 times rarer, and the float32 bounds below still hold.
  const at::ScalarType dt = dev.is_cpu() ? at::kFloat : at::kDouble;
  net->to(dev, dt);
  ref->to(dt);
  DDPOptions o;
  o.group = handle(g);
  DistributedDataParallel<models::FashionCNN> model(net, o);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(29);
  auto sgd = [](torch::nn::Module& m) {
    at::NoGradGuard no_grad;
    for (auto& p : m.parameters()) {
      p.sub_(0.1 * p.grad());
      p.mutable_grad().zero_();
    }
  };
  for (int step = 0; step < 2; ++step) {
    const std::string what = tag(g, "FashionCNN, step " + std::to_string(step));
    at::Tensor x = at::randn({total, 1, 28, 28}, gen).to(dt), y = at::randint(10, {total}, gen);
    at::Tensor out = model(x.narrow(0, start, n).to(dev));
    (at::cross_entropy_loss(out, y.narrow(0, start, n).to(dev), {}, at::Reduction::Sum) * (double(w) / total))
        .backward();
    (at::cross_entropy_loss(ref->forward(x), y, {}, at::Reduction::Sum) / total).backward();
    // The longest float32 reduction is BatchNorm 1's, over M = N x 28 x 28 values per
    // channel; every gradient passes through it (the other sums are the same on both
    // sides but for DDP's regrouping over W <= 4 ranks): bound(M, its largest entry)
    // per tensor, as for one layer. conv1.bias and conv2.bias feed a BatchNorm, which
    // removes any constant shift: their exact gradients are 0 and both sides hold
    // the rounding noise of sums of BatchNorm's input gradients, so their scale is
    // the network's largest gradient entry instead.
    auto mine = net->named_parameters(), theirs = ref->named_parameters();
    double largest = 0;
    for (const auto& p : theirs) largest = std::max(largest, max_abs(p.value().grad()));
    auto tolerance = [&](const std::string& name, const at::Tensor& grad) {
      return bound(total * 28 * 28, name == "conv1.bias" || name == "conv2.bias" ? largest : max_abs(grad));
    };
    for (const auto& p : theirs)
      expect_within(mine[p.key()].grad(), p.value().grad(), tolerance(p.key(), p.value().grad()),
                    what + ": gradient of " + p.key());
    // Negative control: DDP over plain BatchNorms (each rank's statistics) is far off.
    if (step == 0 && w > 1) {
      auto plain = fashion_cnn(7);
      plain->to(dev, dt);
      DistributedDataParallel<models::FashionCNN> local(plain, o);
      (at::cross_entropy_loss(local(x.narrow(0, start, n).to(dev)), y.narrow(0, start, n).to(dev), {},
                              at::Reduction::Sum) *
       (double(w) / total))
          .backward();
      double worst = 0;
      auto local_params = plain->named_parameters();
      for (const auto& p : theirs)
        worst = std::max(
            worst, max_diff(local_params[p.key()].grad(), p.value().grad()) / tolerance(p.key(), p.value().grad()));
      EXPECT_GT(worst, 10.0) << what << ": the check cannot tell synchronized statistics from local ones";
    }
    sgd(*net);
    sgd(*ref);
  }
  // Running statistics: momentum blends of BatchNorm's mean and variance, whose
  // terms are inputs of size about |mean| + std, and squared deviations.
  auto mine = net->named_buffers(), theirs = ref->named_buffers();
  for (const std::string bn : {"bn1.", "bn2."}) {
    const at::Tensor mean = theirs[bn + "running_mean"], var = theirs[bn + "running_var"];
    const std::string what = tag(g, "FashionCNN: " + bn);
    expect_within(mine[bn + "running_mean"], mean, bound(total * 28 * 28, max_abs(mean) + max_abs(var.sqrt())),
                  what + "running_mean");
    expect_within(mine[bn + "running_var"], var, bound(total * 28 * 28, max_abs(var)), what + "running_var");
    EXPECT_TRUE(at::equal(mine[bn + "num_batches_tracked"].cpu(), theirs[bn + "num_batches_tracked"]))
        << what << "num_batches_tracked";
  }
  EXPECT_TRUE(parameters_consistent(*net.ptr(), 0, handle(g))) << tag(g, "FashionCNN: replicas diverged");
}

}  // namespace

const std::vector<SuiteCase>& sync_batch_norm_suite() {
  static const std::vector<SuiteCase> cases = {
      {"SyncBatchNormLayers", sync_batch_norm_layers},
      {"SyncBatchNormTooFewValues", sync_batch_norm_too_few_values},
      {"SyncBatchNormFashionCnnDdp", sync_batch_norm_fashion_cnn},
  };
  return cases;
}

}  // namespace ddp::testing
