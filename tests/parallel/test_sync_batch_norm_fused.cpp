// SyncBatchNorm's fused path on the CPU. ATen has batch_norm_elemt, batch_norm_backward_reduce and
// batch_norm_backward_elemt for CUDA only; this binary registers CPU kernels for them with the CUDA kernels'
// contract (their formulas, PyTorch's Normalization.cuh; the dtypes and shapes they read, checked, so that an
// argument the GPU would refuse is refused here), so SyncBatchNorm chooses the fused path on the CPU as it does
// on a GPU. The SyncBatchNorm suite then runs on it over gloo and nccl's contract at worlds 1-4, and cases of its
// own check what the fused path keeps: the input's memory format, and 16-bit inputs.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/library.h>
#include <torch/nn.h>

#include <atomic>
#include <cmath>
#include <tuple>

#include "ddp/parallel/sync_batch_norm.h"
#include "support/ddp_suite.h"
#include "support/fused_kernels_case.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

std::atomic<int> elemt_calls{0}, reduce_calls{0}, backward_elemt_calls{0};

at::ScalarType acc_of(const at::Tensor& x) {
  const at::ScalarType t = x.scalar_type();
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

// Per-channel statistics, as the CUDA kernels read them: [C], contiguous, on the input's device, in the input's
// accumulation type.
void check_stat(const c10::optional<at::Tensor>& t, const at::Tensor& input, const char* op, const char* what) {
  if (!t || !t->defined()) return;
  TORCH_CHECK(t->dim() == 1 && t->size(0) == input.size(1) && t->is_contiguous(), op, ": ", what,
              " must be a contiguous [", input.size(1), "], got ", t->sizes());
  TORCH_CHECK(t->device() == input.device(), op, ": ", what, " on ", t->device(), ", the input on ", input.device());
  TORCH_CHECK(t->scalar_type() == acc_of(input), op, ": ", what, " must be ", acc_of(input), " for a ",
              input.scalar_type(), " input (the kernel reads it so), got ", t->scalar_type());
}

// The input as SyncBatchNorm hands it over: not empty (the kernels' launches have no empty grid), and a gradient
// of its dtype, device, shape and layout (CUDA's channels-last kernels run only where both are channels last).
void check_input(const at::Tensor& input, const at::Tensor* grad_out, const char* op) {
  TORCH_CHECK(input.numel() > 0, op, ": an empty input reached the kernel");
  if (!grad_out) return;
  TORCH_CHECK(grad_out->scalar_type() == input.scalar_type(), op, ": grad_out must be the input's dtype");
  TORCH_CHECK(grad_out->device() == input.device() && grad_out->sizes() == input.sizes(), op,
              ": grad_out must be the input's size, on its device");
  std::vector<at::MemoryFormat> layouts = {at::MemoryFormat::Contiguous};
  if (input.dim() == 4) layouts.push_back(at::MemoryFormat::ChannelsLast);
  if (input.dim() == 5) layouts.push_back(at::MemoryFormat::ChannelsLast3d);
  for (auto f : layouts)
    TORCH_CHECK(grad_out->is_contiguous(f) == input.is_contiguous(f), op, ": grad_out laid out otherwise than the ",
                "input (strides ", grad_out->strides(), " and ", input.strides(), ")");
}

std::vector<int64_t> channel_view(const at::Tensor& input) {
  std::vector<int64_t> v(input.dim(), 1);
  v[1] = input.size(1);
  return v;
}

std::vector<int64_t> all_but_channels(const at::Tensor& input) {
  std::vector<int64_t> d = {0};
  for (int64_t i = 2; i < input.dim(); ++i) d.push_back(i);
  return d;
}

at::Tensor standin_elemt(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                         const c10::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                         double) {
  ++elemt_calls;
  const char* op = "batch_norm_elemt";
  check_input(input, nullptr, op);
  for (auto [t, what] :
       {std::pair{c10::optional<at::Tensor>(mean), "mean"}, {invstd, "invstd"}, {weight, "weight"}, {bias, "bias"}})
    check_stat(t, input, op, what);
  const auto v = channel_view(input);
  at::Tensor y = (input.to(acc_of(input)) - mean.view(v)) * invstd.view(v);
  if (weight && weight->defined()) y = y * weight->view(v);
  if (bias && bias->defined()) y = y + bias->view(v);
  return at::empty_like(input).copy_(y);  // the input's memory format, as the kernel's output
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> standin_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const c10::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  ++reduce_calls;
  const char* op = "batch_norm_backward_reduce";
  check_input(input, &grad_out, op);
  for (auto [t, what] : {std::pair{c10::optional<at::Tensor>(mean), "mean"}, {invstd, "invstd"}, {weight, "weight"}})
    check_stat(t, input, op, what);
  TORCH_CHECK(!(weight_g || bias_g) || (weight && weight->defined()), op, ": weight_g or bias_g without a weight");
  const auto v = channel_view(input);
  const auto dims = all_but_channels(input);
  const at::Tensor g = grad_out.to(acc_of(input)), xmu = input.to(acc_of(input)) - mean.view(v);
  const at::Tensor sum_dy = g.sum(dims), sum_dy_xmu = (g * xmu).sum(dims);
  at::Tensor gw, gb;
  if (weight_g) gw = (sum_dy_xmu * invstd).to(weight->scalar_type());
  if (bias_g) gb = sum_dy.to(weight->scalar_type());
  if (!input_g) return {at::Tensor(), at::Tensor(), gw, gb};
  return {sum_dy, sum_dy_xmu, gw, gb};
}

at::Tensor standin_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                  const at::Tensor& invstd, const c10::optional<at::Tensor>& weight,
                                  const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  ++backward_elemt_calls;
  const char* op = "batch_norm_backward_elemt";
  check_input(input, &grad_out, op);
  for (auto [t, what] : {std::pair{c10::optional<at::Tensor>(mean), "mean"},
                         {invstd, "invstd"},
                         {weight, "weight"},
                         {sum_dy, "sum_dy"},
                         {sum_dy_xmu, "sum_dy_xmu"}})
    check_stat(t, input, op, what);
  TORCH_CHECK(count.scalar_type() == at::kInt && count.dim() == 1 && count.device() == input.device(), op,
              ": count must be a 1-d int32 tensor on the input's device (the kernel reads int*), got ",
              count.scalar_type(), " ", count.sizes(), " on ", count.device());
  const auto v = channel_view(input);
  const at::Tensor norm = 1.0 / count.sum().to(acc_of(input));
  const at::Tensor k = weight && weight->defined() ? invstd * *weight : invstd;
  const at::Tensor xmu = input.to(acc_of(input)) - mean.view(v);
  at::Tensor dx =
      grad_out.to(acc_of(input)) - (sum_dy * norm).view(v) - xmu * (invstd * invstd * sum_dy_xmu * norm).view(v);
  return at::empty_like(input).copy_(dx * k.view(v));
}

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("batch_norm_elemt", TORCH_FN(standin_elemt));
  m.impl("batch_norm_backward_reduce", TORCH_FN(standin_backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(standin_backward_elemt));
}

struct Calls {
  int elemt = elemt_calls, reduce = reduce_calls, backward_elemt = backward_elemt_calls;
};

// The SyncBatchNorm suite's cases, over a backend, at a world size.
using Param = std::tuple<std::string, int, size_t>;  // backend, world, case index

class SyncBatchNormFused : public ::testing::TestWithParam<Param> {};

TEST_P(SyncBatchNormFused, Case) {
  at::set_num_threads(1);
  auto [backend, world, index] = GetParam();
  const SuiteCase& c = sync_batch_norm_suite()[index];
  const Calls before;
  run_ranks(backend, world, c.run);
  // A group of one is BatchNorm; fewer than two values refuse before normalizing.
  if (world == 1 || c.name == "SyncBatchNormTooFewValues") return;
  EXPECT_GT(elemt_calls, before.elemt) << "the forward did not take the fused path";
  EXPECT_GT(reduce_calls, before.reduce) << "the backward's sums did not take the fused path";
  EXPECT_GT(backward_elemt_calls, before.backward_elemt) << "the input gradient did not take the fused path";
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const std::string backend : {"gloo", "nccl-standin"})
    for (size_t i = 0; i < sync_batch_norm_suite().size(); ++i)
      for (int w = 1; w <= 4; ++w) out.emplace_back(backend, w, i);
  return out;
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  std::string b = std::get<0>(info.param) == "gloo" ? "gloo" : "nccl_standin";
  return b + "_w" + std::to_string(std::get<1>(info.param)) + "_" +
         sync_batch_norm_suite()[std::get<2>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Suite, SyncBatchNormFused, ::testing::ValuesIn(params()), name);

// The per-rank passes on the stand-ins against the composite ones: the case test_cuda runs with CUDA's kernels.
TEST(SyncBatchNormFusedPath, KernelsEqualTheCompositePasses) {
  fused_kernels_against_composite(at::Device(at::kCPU), /*moments_in_float32=*/false);
}

// The fused kernels write in the input's memory format: a channels-last input keeps it, forward and backward,
// with no copy to the contiguous layout (the suite's channels-last case checks the values).
TEST(SyncBatchNormFusedPath, KeepsChannelsLast) {
  at::set_num_threads(1);
  run_ranks("gloo", 2, [](ProcessGroup& g) {
    SyncBatchNorm bn(torch::nn::BatchNormOptions(3), handle(g));
    const auto cl = at::MemoryFormat::ChannelsLast;
    at::Tensor x = at::randn({4, 3, 5, 5}).contiguous(cl).requires_grad_(true);
    at::Tensor y = bn(x);
    EXPECT_TRUE(y.is_contiguous(cl)) << tag(g, "output not channels last");
    (y * at::randn({4, 3, 5, 5}).contiguous(cl)).sum().backward();
    EXPECT_TRUE(x.grad().is_contiguous(cl)) << tag(g, "input gradient not channels last");
    // A gradient that comes contiguous (the user's own, to backward) reaches the kernels in the input's layout.
    at::Tensor x2 = at::randn({4, 3, 5, 5}).contiguous(cl).requires_grad_(true);
    at::Tensor y2 = bn(x2);
    y2.backward(at::randn({4, 3, 5, 5}));
    EXPECT_TRUE(x2.grad().is_contiguous(cl)) << tag(g, "input gradient not channels last");
  });
}

// bfloat16 inputs (autocast's) go to the kernels as they are, statistics in float32: the output and the input
// gradient are those of float32 inputs holding the same values, to bfloat16's precision. With u = 2^-8 (its unit
// roundoff): the moments are rounded once (the CPU's batch_norm_update_stats returns them in bfloat16; CUDA's in
// float32), a relative u on the mean and u / 2 on invstd, and the result once, u |y|:
//   |y16 - y32| <= u (|w| invstd |mean| + |w| |x_hat| / 2 + |y|);
// the input gradient sees the same two statistics in x_hat (twice: in itself and in sum dy x_hat) and invstd:
//   |dx16 - dx32| <= u (|dx| + 4 invstd |w| |dy| (2 + x_hat^2)),
// plus float32's own rounding, 8 M 2^-24 of each, M the values per channel (sync_batch_norm_suite.cpp's bound).
TEST(SyncBatchNormFusedPath, Bfloat16InputsAgainstFloat32) {
  at::set_num_threads(1);
  run_ranks("gloo", 3, [](ProcessGroup& g) {
    const int64_t n = 4, c = 3, hw = 6 * 6, m = n * hw * g.size();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11 + g.rank());
    at::Tensor x16 = (at::randn({n, c, 6, 6}, gen) * 3 + 2 * g.rank()).to(at::kBFloat16);  // each rank its own mean
    at::Tensor dy16 = at::randn({n, c, 6, 6}, gen).to(at::kBFloat16);
    at::Tensor x32 = x16.to(at::kFloat), dy32 = dy16.to(at::kFloat);
    SyncBatchNorm bn16(torch::nn::BatchNormOptions(c), handle(g)), bn32(torch::nn::BatchNormOptions(c), handle(g));
    {
      at::NoGradGuard no_grad;
      at::Tensor w = at::rand({c}, at::make_generator<at::CPUGeneratorImpl>(3)) + 0.5;
      bn16->weight.copy_(w);
      bn32->weight.copy_(w);
    }
    x16.requires_grad_(true);
    x32.requires_grad_(true);
    at::Tensor y16 = bn16(x16), y32 = bn32(x32);
    EXPECT_EQ(y16.scalar_type(), at::kBFloat16);
    (y16.to(at::kFloat) * dy32).sum().backward();
    (y32 * dy32).sum().backward();
    EXPECT_EQ(x16.grad().scalar_type(), at::kBFloat16);

    const double u = std::ldexp(1.0, -8), f32 = 8.0 * double(m) * std::ldexp(1.0, -24);
    auto amax = [](const at::Tensor& t) { return t.abs().max().item<double>(); };
    const double wmax = amax(bn32->weight), ymax = amax(y32), dxmax = amax(x32.grad()), dymax = amax(dy32);
    // The global statistics, from the float32 inputs of every rank.
    at::Tensor sums = at::stack({x32.detach().sum({0, 2, 3}), x32.detach().square().sum({0, 2, 3})});
    g.all_reduce(sums);
    const at::Tensor mean = sums[0] / double(m), var = sums[1] / double(m) - mean.square();
    const double mmax = amax(mean), inv = amax((var + 1e-5).rsqrt());
    const double z = amax((x32.detach() - mean.view({1, c, 1, 1})) * (var + 1e-5).rsqrt().view({1, c, 1, 1}));
    const double y_tol = u * (wmax * inv * mmax + wmax * z / 2 + ymax) + f32 * ((amax(x32) * inv + z) * wmax);
    const double dx_tol =
        u * (dxmax + 4 * inv * wmax * dymax * (2 + z * z)) + f32 * 2 * inv * wmax * dymax * (2 + z * z);
    const double dy_off = amax(y16.detach().to(at::kFloat) - y32.detach());
    const double dx_off = amax(x16.grad().to(at::kFloat) - x32.grad());
    EXPECT_LE(dy_off, y_tol) << tag(g, "output");
    EXPECT_LE(dx_off, dx_tol) << tag(g, "input gradient");
    // Negative control: each rank's own statistics are far off.
    at::Tensor local = at::batch_norm(x32.detach(), bn32->weight, bn32->bias, {}, {}, true, 0.0, 1e-5, false);
    EXPECT_GT(amax(local - y32.detach()), 10 * y_tol) << tag(g, "the check cannot tell");
  });
}

}  // namespace
}  // namespace ddp::testing
