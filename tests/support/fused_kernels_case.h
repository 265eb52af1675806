// SyncBatchNorm's per-rank passes with the fused kernels on `dev` against the CPU's composite ones, on the same
// values and statistics: float32, float16 and bfloat16 inputs, contiguous and channels last (the dtypes and
// layouts the kernels are called with). test_cuda runs it with ATen's CUDA kernels; test_sync_batch_norm_fused
// with its CPU stand-ins, which proves the case itself on the CPU. Tolerances: the suite's 8 M u32 S for each
// float32 sum over the M values of a channel (sync_batch_norm_suite.cpp), plus one rounding of a 16-bit result on
// each side, 2 u16 |result| (u16 = 2^-11 for float16, 2^-8 for bfloat16). moments_in_float32: the device's
// batch_norm_update_stats returns float32 statistics for 16-bit inputs (CUDA's; the CPU's returns them in the
// input's type, and LibTorch 1.13's has no float16), so that they are compared for every dtype, not only float32.
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "parallel/sync_batch_norm_kernels.h"

namespace ddp::testing {

inline void fused_kernels_against_composite(const at::Device& dev, bool moments_in_float32) {
  const double u32 = std::ldexp(1.0, -24);
  for (at::ScalarType t : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (bool channels_last : {false, true}) {
      const std::string what = std::string(c10::toString(t)) + (channels_last ? ", channels last" : "");
      auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
      const at::Tensor x = (at::randn({6, 3, 5, 5}, gen) * 2 + 0.5).to(t), dy = at::randn({6, 3, 5, 5}, gen).to(t);
      const at::Tensor w = at::rand({3}, gen) + 0.5, b = at::randn({3}, gen);
      auto there = [&](const at::Tensor& v) {
        at::Tensor g = v.to(dev);
        return channels_last ? g.contiguous(at::MemoryFormat::ChannelsLast) : g;
      };
      const at::Tensor xg = there(x), dyg = there(dy);
      const detail::SyncBatchNormKernels cpu(x, /*fused=*/false), fused(xg);
      ASSERT_TRUE(fused.fused()) << what << ": no fused SyncBatchNorm kernels on " << dev;
      const int64_t m = 6 * 5 * 5;
      const double u16 = t == at::kHalf ? std::ldexp(1.0, -11) : t == at::kBFloat16 ? std::ldexp(1.0, -8) : 0.0;
      const double xmax = x.to(at::kFloat).abs().max().item<double>();
      const double dymax = dy.to(at::kFloat).abs().max().item<double>();
      auto near = [&](const at::Tensor& got, const at::Tensor& want, double tol, const std::string& name) {
        const double d = (got.cpu().to(at::kDouble) - want.cpu().to(at::kDouble)).abs().max().item<double>();
        EXPECT_LE(d, tol) << what << ": " << name;
      };
      auto [mean, var] = cpu.moments(x);
      const double spread = xmax + mean.abs().max().item<double>();  // |x - mean|
      if (t == at::kFloat || moments_in_float32) {
        auto [mean_g, var_g] = fused.moments(xg);
        near(mean_g, mean, 8 * m * u32 * xmax, "mean");
        near(var_g, var, 8 * m * u32 * spread * spread, "variance");
      }
      const at::Tensor invstd = (var + 1e-5).rsqrt(), invstd_g = invstd.to(dev), mean_gpu = mean.to(dev);
      const double inv = invstd.max().item<double>(), wmax = w.abs().max().item<double>();
      const double z = spread * inv;  // |x hat|
      const at::Tensor y = cpu.normalize(x, w, b, mean, invstd);
      const at::Tensor y_g = fused.normalize(xg, w.to(dev), b.to(dev), mean_gpu, invstd_g);
      EXPECT_EQ(y_g.scalar_type(), t) << what;
      EXPECT_EQ(y_g.is_contiguous(at::MemoryFormat::ChannelsLast), channels_last) << what << ": output layout";
      const double ymax = y.to(at::kFloat).abs().max().item<double>();
      near(y_g, y, 2 * u16 * ymax + 8 * u32 * (z * wmax + b.abs().max().item<double>()), "output");
      auto s = cpu.sums(dy, x, w, mean, invstd, true, true);
      auto s_g = fused.sums(dyg, xg, w.to(dev), mean_gpu, invstd_g, true, true);
      const double sum_tol = 8 * m * u32 * double(m) * dymax;
      near(s_g.sum_dy, s.sum_dy, sum_tol, "sum dy");
      near(s_g.sum_dy_xmu, s.sum_dy_xmu, sum_tol * z / inv, "sum dy (x - mean)");
      near(s_g.grad_weight, s.grad_weight, sum_tol * z, "weight gradient");
      near(s_g.grad_bias, s.grad_bias, sum_tol, "bias gradient");
      const at::Tensor total = at::full({}, double(m), at::kDouble);
      const at::Tensor dx = cpu.input_gradient(dy, x, w, mean, invstd, s.sum_dy, s.sum_dy_xmu, total);
      const at::Tensor dx_g = fused.input_gradient(dyg, xg, w.to(dev), mean_gpu, invstd_g, s.sum_dy.to(dev),
                                                   s.sum_dy_xmu.to(dev), total.to(dev));
      EXPECT_EQ(dx_g.scalar_type(), t) << what;
      EXPECT_EQ(dx_g.is_contiguous(at::MemoryFormat::ChannelsLast), channels_last) << what << ": gradient layout";
      const double dxmax = dx.to(at::kFloat).abs().max().item<double>();
      near(dx_g, dx, 2 * u16 * dxmax + 8 * u32 * 2 * inv * wmax * dymax * (2 + z * z), "input gradient");
    }
  }
  // An empty batch (a rank without samples): empty results and zero sums, and no kernel called (CUDA's launches
  // have no empty grid; the CPU stand-ins refuse an empty input).
  const auto on = at::TensorOptions().device(dev);
  for (at::ScalarType t : {at::kFloat, at::kBFloat16}) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{0, 3}, std::vector<int64_t>{0, 3, 5, 5}}) {
      const std::string what = std::string("empty ") + c10::toString(t) + " " + c10::str(at::IntArrayRef(shape));
      at::Tensor x = at::empty(shape, on.dtype(t));
      if (shape.size() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
      const detail::SyncBatchNormKernels k(x);
      ASSERT_TRUE(k.fused()) << what;
      const at::Tensor mean = at::zeros({3}, on.dtype(at::kDouble)), invstd = at::ones({3}, on.dtype(at::kDouble));
      const at::Tensor w = at::ones({3}, on), b = at::zeros({3}, on), zeros = at::zeros({3}, at::kDouble);
      const at::Tensor y = k.normalize(x, w, b, mean, invstd);
      EXPECT_EQ(y.sizes(), x.sizes()) << what;
      EXPECT_EQ(y.scalar_type(), t) << what;
      auto s = k.sums(x, x, w, mean, invstd, true, true);
      EXPECT_TRUE(at::equal(s.sum_dy.cpu(), zeros)) << what << ": sum dy";
      EXPECT_TRUE(at::equal(s.sum_dy_xmu.cpu(), zeros)) << what << ": sum dy (x - mean)";
      EXPECT_TRUE(at::equal(s.grad_weight.cpu().to(at::kDouble), zeros)) << what << ": weight gradient";
      EXPECT_TRUE(at::equal(s.grad_bias.cpu().to(at::kDouble), zeros)) << what << ": bias gradient";
      const at::Tensor dx =
          k.input_gradient(x, x, w, mean, invstd, s.sum_dy, s.sum_dy_xmu, at::full({}, 8.0, on.dtype(at::kDouble)));
      EXPECT_EQ(dx.sizes(), x.sizes()) << what;
      EXPECT_EQ(dx.scalar_type(), t) << what;
    }
  }
}

}  // namespace ddp::testing
