// to_16bit and the 16-bit sums against LibTorch's own casts, bit for bit.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "ddp/dist/half.h"
#include "ddp/errors.h"

namespace ddp {
namespace {

// Random magnitudes over float16's whole range and past it, exact ties, subnormals, zeros, inf, NaN.
at::Tensor awkward_floats() {
  at::manual_seed(3);
  at::Tensor x = at::randn({4099}) * at::pow(2.0, at::randint(-30, 20, {4099}).to(at::kFloat));
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f,
                                      -0.0f,
                                      inf,
                                      -inf,
                                      std::nanf(""),
                                      65504.0f,
                                      65520.0f,
                                      6.1e-5f,
                                      5.96e-8f,
                                      1.0f + std::ldexp(1.0f, -11),  // a tie between two halves: rounds to even
                                      1.0f + 3 * std::ldexp(1.0f, -11),
                                      1e-9f};
  return at::cat({x, at::tensor(special)});
}

TEST(Half, ToFloat16EqualsLibTorchsCast) {
  const at::Tensor x = awkward_floats();
  for (double divisor : {1.0, 2.0, 3.0}) {
    at::Tensor ours = to_16bit(x, at::kHalf, divisor);
    at::Tensor theirs = (x / divisor).to(at::kHalf);
    at::Tensor nan = theirs.isnan();  // NaN payloads may differ; everything else bit for bit
    EXPECT_TRUE(at::equal(ours.isnan(), nan));
    EXPECT_TRUE(at::equal(ours.view(at::kShort).masked_fill(nan, 0), theirs.view(at::kShort).masked_fill(nan, 0)))
        << "divisor " << divisor;
  }
  at::Tensor b = to_16bit(x, at::kBFloat16, 3.0), want = (x / 3.0).to(at::kBFloat16);
  at::Tensor nan = want.isnan();
  EXPECT_TRUE(at::equal(b.isnan(), nan));
  EXPECT_TRUE(at::equal(b.view(at::kShort).masked_fill(nan, 0), want.view(at::kShort).masked_fill(nan, 0)));
  EXPECT_THROW(to_16bit(x.to(at::kDouble), at::kHalf), InvalidArgument);
}

TEST(Half, SumsEqualLibTorchsAdditions) {
  const at::Tensor x = awkward_floats();
  at::Tensor y = at::roll(x, 7);
  for (at::ScalarType dt : {at::kHalf, at::kBFloat16}) {
    at::Tensor a = x.to(dt), b = y.to(dt);
    at::Tensor want = (a.to(at::kFloat) + b.to(at::kFloat)).to(dt);  // one rounding of the float sum
    at::Tensor got = b.clone();
    auto* in = reinterpret_cast<const uint16_t*>(a.data_ptr());
    auto* inout = reinterpret_cast<uint16_t*>(got.data_ptr());
    if (dt == at::kHalf)
      detail::add_half(in, inout, a.numel());
    else
      detail::add_bfloat16(in, inout, a.numel());
    // NaN payloads may differ; everything else bit for bit.
    at::Tensor nan = want.isnan();
    EXPECT_TRUE(at::equal(got.isnan(), nan)) << dt;
    EXPECT_TRUE(at::equal(got.view(at::kShort).masked_fill(nan, 0), want.view(at::kShort).masked_fill(nan, 0))) << dt;
  }
}

}  // namespace
}  // namespace ddp
