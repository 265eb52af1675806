// --precision: autocast's scope, bfloat16's accuracy per operation against a
// float64 reference with a derived bound, and how "auto" chooses.
#include <gtest/gtest.h>

#include <ATen/autocast_mode.h>

#include <cmath>

#include "ddp/torch_compat.h"
#include "ddp/train/machine.h"
#include "ddp/train/models/resnet.h"
#include "ddp/train/precision.h"

namespace ddp::train {
namespace {

// bfloat16 keeps 8 significant bits: unit roundoff (round to nearest) u = 2^-8.
constexpr double kBf16U = 1.0 / 256;

// x rounded to `bits` significant bits (round half to even), in float64.
at::Tensor round_to_bits(const at::Tensor& x, int bits) {
  auto [m, e] = at::frexp(x.to(at::kDouble));  // x = m 2^e, 0.5 <= |m| < 1
  const double scale = std::ldexp(1.0, bits);
  return at::round(m * scale) / scale * at::pow(2.0, e.to(at::kDouble));
}

// Worst-case bound on |computed - exact| for a sum of K products a_k b_k whose
// operands are rounded to unit roundoff u, whose products and additions are each
// rounded at most once with u (any order, any accumulation precision at least the
// operands'), and whose result is rounded once more (Higham, Accuracy and Stability, 3.1):
//   e1 = ((1+u)^2 - 1) S + gamma_K (1+u)^2 S,  gamma_K = K u / (1 - K u),  S = sum |a_k b_k|
//   bound = e1 + u (|y| + e1)
at::Tensor product_sum_bound(const at::Tensor& abs_sum, const at::Tensor& exact, int64_t k, double u) {
  const double gamma = double(k) * u / (1 - double(k) * u);
  at::Tensor e1 = abs_sum * ((1 + u) * (1 + u) - 1 + gamma * (1 + u) * (1 + u));
  return e1 + u * (exact.abs() + e1);
}

// `got` (bfloat16, from autocast) lies within `bound` of `exact`, yet differs from
// it somewhere; `coarse` (the same computation with 4-bit operands) breaks the bound.
void expect_within_bound(const at::Tensor& got, const at::Tensor& exact, const at::Tensor& bound,
                         const at::Tensor& coarse) {
  ASSERT_EQ(got.scalar_type(), at::kBFloat16);
  at::Tensor err = (got.to(at::kDouble) - exact).abs();
  EXPECT_GT(err.max().item<double>(), 0.0) << "nothing was rounded: autocast did not apply";
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "worst err/bound " << (err / bound).max().item<double>();
  EXPECT_GT(((coarse - exact).abs() / bound).max().item<double>(), 1.0) << "the bound cannot tell 4 bits from 8";
}

// Under autocast a linear layer (K = 4 inputs + bias) computes in bfloat16. Every
// output lies within the bound above (u = 2^-8); a cast to 4 significant bits
// (u = 2^-4, what a wrong autocast dtype such as an 8-bit float would give) breaks it.
TEST(Precision, Bf16LinearWithinDerivedBound) {
  at::manual_seed(5);
  const int64_t in = 4;
  at::Tensor x = at::randn({64, in}), w = at::randn({16, in}), b = at::randn({16});
  at::Tensor exact = at::addmm(b.to(at::kDouble), x.to(at::kDouble), w.to(at::kDouble).t());
  at::Tensor abs_sum = at::addmm(b.to(at::kDouble).abs(), x.to(at::kDouble).abs(), w.to(at::kDouble).abs().t());
  at::Tensor bound = product_sum_bound(abs_sum, exact, in + 1, kBf16U);
  at::Tensor got;
  {
    Autocast autocast(Precision::BF16);
    got = at::linear(x, w, b);
  }
  expect_within_bound(got, exact, bound, at::addmm(round_to_bits(b, 4), round_to_bits(x, 4), round_to_bits(w, 4).t()));
}

// The same for a convolution: 1 input channel, 2x2 kernel (K = 4 + bias).
TEST(Precision, Bf16ConvolutionWithinDerivedBound) {
  at::manual_seed(6);
  at::Tensor x = at::randn({8, 1, 9, 9}), w = at::randn({6, 1, 2, 2}), b = at::randn({6});
  auto conv64 = [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return at::conv2d(x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble));
  };
  at::Tensor exact = conv64(x, w, b);
  at::Tensor bound = product_sum_bound(conv64(x.abs(), w.abs(), b.abs()), exact, 5, kBf16U);
  at::Tensor got;
  {
    Autocast autocast(Precision::BF16);
    got = at::conv2d(x, w, b);
  }
  expect_within_bound(got, exact, bound, at::conv2d(round_to_bits(x, 4), round_to_bits(w, 4), round_to_bits(b, 4)));
}

// --precision bf16: the forward pass runs in bfloat16 inside the scope only;
// weights and gradients stay float32; float32 is bit-identical again after.
TEST(Precision, Bf16AutocastScopesTheForwardPass) {
  at::manual_seed(3);
  at::Tensor w = models::patch_whitening(at::randn({32, 3, 8, 8}));
  models::ResNet9BagOfTricks net(w, 10, 0.125, 1);
  net->eval();
  at::Tensor x = at::randn({4, 3, 32, 32});
  { Autocast settle(Precision::BF16); }  // the first scope may choose the process's kernels (see Autocast)
  at::Tensor fp32 = net->forward(x);
  at::Tensor bf16;
  {
    Autocast autocast(Precision::BF16);
    EXPECT_TRUE(compat::autocast_enabled(at::kCPU));
    bf16 = net->forward(x);
  }
  EXPECT_FALSE(compat::autocast_enabled(at::kCPU));
  EXPECT_EQ(fp32.scalar_type(), at::kFloat);
  EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
  EXPECT_FALSE(at::equal(bf16.to(at::kFloat), fp32)) << "autocast changed nothing";
  EXPECT_TRUE(at::equal(net->forward(x), fp32)) << "float32 again after the scope";

  net->train();
  {
    Autocast autocast(Precision::BF16);
    net->forward(at::randn({4, 3, 32, 32})).to(at::kFloat).sum().backward();
  }
  for (const auto& p : net->parameters()) {
    EXPECT_EQ(p.scalar_type(), at::kFloat);
    if (p.grad().defined()) EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
  }
  Autocast off(Precision::FP32);
  EXPECT_FALSE(compat::autocast_enabled(at::kCPU));
}

TEST(Precision, ParseNamesTheFlag) {
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(parse_precision("fp32"), Precision::FP32);
  try {
    parse_precision("fp16");
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "ddp-train: --precision must be fp32, bf16 or auto, got 'fp16'");
  }
}

// auto: bf16 only where the CPU has bfloat16 instructions and oneDNN may use them.
TEST(Precision, AutoChoosesByCpuFlags) {
  const std::string icelake = "fpu sse avx2 avx512f avx512bw avx512_vnni";
  const std::string zen4 = "fpu avx2 avx512f avx512_bf16 avx512_vnni";
  const std::string sapphire = "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile";

  Bf16Support none = bf16_support(icelake, "");
  EXPECT_FALSE(none.native);
  EXPECT_EQ(none.why, "no avx512_bf16 or amx_bf16 in the CPU's flags, so bfloat16 would be emulated");
  PrecisionChoice c = choose_precision("auto", none);
  EXPECT_EQ(c.precision, Precision::FP32);
  EXPECT_EQ(c.reason, "auto: no avx512_bf16 or amx_bf16 in the CPU's flags, so bfloat16 would be emulated");

  c = choose_precision("auto", bf16_support(zen4, ""));
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_EQ(c.reason, "auto: this CPU has avx512_bf16");
  c = choose_precision("auto", bf16_support(sapphire, "avx512_core_amx"));
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_EQ(c.reason, "auto: this CPU has amx_bf16 and avx512_bf16");

  // ONEDNN_MAX_CPU_ISA below the bfloat16 instructions (the AVX2 paths forced) means fp32.
  c = choose_precision("auto", bf16_support(zen4, "AVX2"));
  EXPECT_EQ(c.precision, Precision::FP32);
  EXPECT_EQ(c.reason,
            "auto: this CPU has avx512_bf16, but ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN below its bfloat16 "
            "instructions");
  EXPECT_TRUE(bf16_support(zen4, "AVX512_CORE_BF16").native);
  EXPECT_FALSE(bf16_support(zen4, "avx512_core_vnni").native);

  // An explicit choice is kept whatever the CPU.
  c = choose_precision("bf16", none);
  EXPECT_EQ(c.precision, Precision::BF16);
  EXPECT_EQ(c.reason, "as asked");
  EXPECT_EQ(choose_precision("fp32", bf16_support(zen4, "")).precision, Precision::FP32);
  EXPECT_THROW(choose_precision("half", none), std::invalid_argument);
  // A flag that merely contains the name does not count.
  EXPECT_FALSE(bf16_support("fpu xavx512_bf16 amx_bf16x", "").native);
}

TEST(Machine, ParsesCpuinfoAndNamesTheFlagsThatMatter) {
  const std::string text =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n"
      "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n";
  CpuInfo cpu = parse_cpuinfo(text, 2);
  EXPECT_EQ(cpu.model, "AMD EPYC 9R14 96-Core Processor");
  EXPECT_EQ(cpu.flags, (std::vector<std::string>{"fpu", "avx2", "avx512f", "avx512_bf16", "avx512_vnni"}));
  EXPECT_EQ(describe(cpu),
            "AMD EPYC 9R14 96-Core Processor, 2 cores (avx2 avx512f avx512_vnni avx512_bf16; no amx_bf16)");
  CpuInfo old = parse_cpuinfo("model name : Old\nflags : fpu sse2\n", 1);
  EXPECT_EQ(describe(old), "Old, 1 core (no avx2, avx512f, avx512_vnni, avx512_bf16, amx_bf16)");
  EXPECT_EQ(parse_cpuinfo("", 4).model, "unknown");
  // This machine's own description names its model.
  EXPECT_NE(describe(cpu_info()).find(cpu_info().model), std::string::npos);
}

}  // namespace
}  // namespace ddp::train
