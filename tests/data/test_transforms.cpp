// Batched transforms: exact normalisation, and the augmentations' defining
// properties on seeded generators.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>

#include <set>

#include "ddp/data/transforms.h"
#include "ddp/dist/errors.h"

namespace ddp::testing {
namespace {

at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

at::Tensor random_batch(int64_t b, int64_t c, int64_t h, int64_t w, uint64_t seed = 7) {
  auto g = gen(seed);
  return at::rand({b, c, h, w}, g) + 0.5;  // no zeros, all distinct: shifts are unambiguous
}

template <typename Fn>
void expect_invalid(Fn fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << part;
  } catch (const ddp::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Transforms, NormalizeExact) {
  // [2, 2, 1, 2]: channel 0 and 1 with their own mean and std.
  at::Tensor x = at::tensor({0, 255, 51, 102, 204, 153, 10, 20}, at::kByte).view({2, 2, 1, 2});
  at::Tensor y = data::normalize(x, {0.5, 0.25}, {0.5, 0.125});
  ASSERT_EQ(y.scalar_type(), at::kFloat);
  ASSERT_EQ(y.sizes(), x.sizes());
  const double v[8] = {0, 255, 51, 102, 204, 153, 10, 20};
  const double mean[2] = {0.5, 0.25}, std[2] = {0.5, 0.125};
  at::Tensor flat = y.contiguous().view({-1});
  for (int i = 0; i < 8; ++i) {
    const int c = (i / 2) % 2;
    // float32 rounds v/255 (<= 1), the difference (<= 1) and the quotient: each error
    // <= u = 2^-24 of its value, the first two magnified by 1/std.
    const double want = (v[i] / 255 - mean[c]) / std[c];
    EXPECT_NEAR(flat[i].item<double>(), want, (2 / std[c] + std::abs(want)) * std::ldexp(1.0, -24)) << "element " << i;
  }
  EXPECT_FLOAT_EQ(flat[0].item<float>(), -1.0f);  // (0 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(flat[1].item<float>(), 1.0f);   // (1 - 0.5) / 0.5
}

TEST(Transforms, NormalizeBadArguments) {
  at::Tensor x = at::zeros({2, 3, 4, 4}, at::kByte);
  expect_invalid(
      [&] {
        data::normalize(x, {0.5, 0.5}, {0.2, 0.2, 0.2});
      },
      "mean and std need one value per channel: images have 3");
  expect_invalid([&] { data::normalize(x, {0.5, 0.5, 0.5}, {0.2, 0, 0.2}); }, "std[1] must be positive");
  expect_invalid([&] { data::normalize(x[0], {0.5, 0.5, 0.5}, {1, 1, 1}); }, "4 dimensions");
  expect_invalid([&] { data::normalize(x.to(at::kFloat), {0.5, 0.5, 0.5}, {1, 1, 1}); }, "uint8");
}

TEST(Transforms, RandomCropPaddingZeroIsIdentity) {
  at::Tensor x = random_batch(6, 2, 5, 7);
  auto g = gen(1);
  EXPECT_TRUE(at::equal(data::random_crop(x, 0, g), x));
}

TEST(Transforms, RandomCropIsAShiftOfThePaddedInput) {
  const int64_t b = 24, h = 5, w = 6, p = 2;
  at::Tensor x = random_batch(b, 2, h, w);
  at::Tensor before = x.clone();
  auto g = gen(3);
  at::Tensor y = data::random_crop(x, p, g);
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(at::equal(x, before));  // input untouched
  at::Tensor padded = at::constant_pad_nd(x, {p, p, p, p}, 0);
  std::set<std::pair<int64_t, int64_t>> used;
  for (int64_t i = 0; i < b; ++i) {
    int matches = 0;
    for (int64_t dy = -p; dy <= p; ++dy)
      for (int64_t dx = -p; dx <= p; ++dx)
        if (at::equal(y[i], padded[i].narrow(1, p + dy, h).narrow(2, p + dx, w))) {
          ++matches;
          used.insert({dy, dx});
        }
    EXPECT_EQ(matches, 1) << "sample " << i << " is not one shift of its padded input";
  }
  EXPECT_GT(used.size(), 5u) << "offsets are not random";
}

// A window of an already padded batch: every (H-h+1)(W-w+1) offset possible, each sample one window.
TEST(Transforms, RandomWindowIsOneWindowOfEachSample) {
  const int64_t b = 200, h = 4, w = 5;
  at::Tensor x = random_batch(b, 2, h + 2, w + 3);
  auto g = gen(7);
  at::Tensor y = data::random_window(x, h, w, g);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{b, 2, h, w}));
  std::set<std::pair<int64_t, int64_t>> used;
  for (int64_t i = 0; i < b; ++i) {
    int matches = 0;
    for (int64_t r = 0; r <= 2; ++r)
      for (int64_t c = 0; c <= 3; ++c)
        if (at::equal(y[i], x[i].narrow(1, r, h).narrow(2, c, w))) {
          ++matches;
          used.insert({r, c});
        }
    EXPECT_EQ(matches, 1) << "sample " << i << " is not one window of its input";
  }
  // 12 offsets, 200 uniform draws: a given offset is missed with probability (11/12)^200 < 3e-8.
  EXPECT_EQ(used.size(), 12u);
  EXPECT_TRUE(at::equal(data::random_window(x, h + 2, w + 3, g), x));
  EXPECT_THROW(data::random_window(x, h + 3, w, g), ddp::InvalidArgument);
}

TEST(Transforms, HorizontalFlip) {
  at::Tensor x = random_batch(64, 3, 4, 5);
  auto g = gen(5);
  EXPECT_TRUE(at::equal(data::random_horizontal_flip(x, 1.0, g), at::flip(x, {3})));
  EXPECT_TRUE(at::equal(data::random_horizontal_flip(x, 0.0, g), x));
  at::Tensor y = data::random_horizontal_flip(x, 0.5, g);
  at::Tensor flipped = at::flip(x, {3});
  int64_t n_flipped = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const bool f = at::equal(y[i], flipped[i]);
    EXPECT_TRUE(f || at::equal(y[i], x[i])) << "sample " << i;
    n_flipped += f;
  }
  EXPECT_GT(n_flipped, 16);  // binomial(64, 0.5): outside [17, 47] with probability < 1e-4
  EXPECT_LT(n_flipped, 48);
}

// Zeros of each sample form one rectangle, the same in every channel, at most
// size x size, and exactly size x size unless it touches the border.
TEST(Transforms, CutoutZeroesOneSquare) {
  for (int64_t size : {4, 3}) {
    const int64_t b = 64, h = 16, w = 12;
    at::Tensor x = at::ones({b, 2, h, w});
    auto g = gen(11 + size);
    at::Tensor y = data::cutout(x, size, g);
    EXPECT_TRUE(at::equal(x, at::ones({b, 2, h, w})));
    int64_t interior = 0;
    for (int64_t i = 0; i < b; ++i) {
      at::Tensor zero = y[i] == 0;
      ASSERT_TRUE(at::equal(zero[0], zero[1])) << "channels differ, sample " << i;
      ASSERT_TRUE(at::equal(y[i].masked_select(~zero), at::ones({(~zero).sum().item<int64_t>()})));
      at::Tensor rows = zero[0].any(1).nonzero().view({-1}), cols = zero[0].any(0).nonzero().view({-1});
      ASSERT_GT(rows.numel(), 0) << "sample " << i << " has no zeros";
      const int64_t r0 = rows.min().item<int64_t>(), r1 = rows.max().item<int64_t>() + 1;
      const int64_t c0 = cols.min().item<int64_t>(), c1 = cols.max().item<int64_t>() + 1;
      const int64_t count = zero[0].sum().item<int64_t>();
      EXPECT_EQ(count, (r1 - r0) * (c1 - c0)) << "zeros of sample " << i << " are not a rectangle";
      EXPECT_LE(r1 - r0, size);
      EXPECT_LE(c1 - c0, size);
      const bool inside = r0 > 0 && c0 > 0 && r1 < h && c1 < w;
      if (inside) {
        EXPECT_EQ(count, size * size) << "sample " << i;
        ++interior;
      } else {
        EXPECT_TRUE(r1 - r0 == size || r0 == 0 || r1 == h) << "sample " << i;
        EXPECT_TRUE(c1 - c0 == size || c0 == 0 || c1 == w) << "sample " << i;
      }
    }
    EXPECT_GT(interior, b / 4);
  }
  auto g = gen(0);
  at::Tensor x = random_batch(3, 1, 4, 4);
  EXPECT_TRUE(at::equal(data::cutout(x, 0, g), x));
}

TEST(Transforms, SameSeedSameOutput) {
  at::Tensor x = random_batch(16, 3, 8, 8);
  auto run = [&](uint64_t seed) {
    auto g = gen(seed);
    return data::cutout(data::random_horizontal_flip(data::random_crop(x, 2, g), 0.5, g), 3, g);
  };
  EXPECT_TRUE(at::equal(run(42), run(42)));
  EXPECT_FALSE(at::equal(run(42), run(43)));
}

TEST(Transforms, BadArguments) {
  at::Tensor x = at::zeros({2, 1, 4, 4});
  auto g = gen(0);
  expect_invalid([&] { data::random_crop(x, -1, g); }, "padding must be >= 0, got -1");
  expect_invalid([&] { data::random_crop(x[0], 1, g); }, "random_crop: batch must have 4 dimensions");
  expect_invalid([&] { data::random_horizontal_flip(x, 1.5, g); }, "p must be in [0, 1], got 1.5");
  expect_invalid([&] { data::random_horizontal_flip(x, std::nan(""), g); }, "p must be in [0, 1]");
  expect_invalid([&] { data::random_horizontal_flip(x.view({2, 16}), 0.5, g); }, "got 2 (sizes [2, 16])");
  expect_invalid([&] { data::cutout(x, -2, g); }, "cutout: size must be >= 0, got -2");
}

}  // namespace
}  // namespace ddp::testing
