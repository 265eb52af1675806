// MNIST-format idx files: round trips of generated files (plain and gzip),
// every kind of bad file, and the real Fashion-MNIST.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "data/data_test_util.h"
#include "ddp/data/idx.h"

namespace ddp::testing {
namespace {

using data::DataError;

struct IdxFiles {
  std::string images, labels;  // file contents
  std::string pixels, label_bytes;
};

// n images of h x w with pseudo-random pixels, labels 0..9.
IdxFiles make_idx(uint32_t n, uint32_t h, uint32_t w, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  IdxFiles f;
  for (uint32_t i = 0; i < n * h * w; ++i) f.pixels.push_back(static_cast<char>(rng() & 0xff));
  for (uint32_t i = 0; i < n; ++i) f.label_bytes.push_back(static_cast<char>(rng() % 10));
  put_be32(f.images, 0x00000803);
  put_be32(f.images, n);
  put_be32(f.images, h);
  put_be32(f.images, w);
  f.images += f.pixels;
  put_be32(f.labels, 0x00000801);
  put_be32(f.labels, n);
  f.labels += f.label_bytes;
  return f;
}

void expect_images(const at::Tensor& t, const IdxFiles& f, int64_t n, int64_t h, int64_t w) {
  ASSERT_EQ(t.scalar_type(), at::kByte);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{n, 1, h, w}));
  const std::string got(static_cast<const char*>(t.contiguous().data_ptr()), t.numel());
  EXPECT_EQ(got, f.pixels);
}

void expect_labels(const at::Tensor& t, const IdxFiles& f) {
  ASSERT_EQ(t.scalar_type(), at::kLong);
  ASSERT_EQ(t.numel(), static_cast<int64_t>(f.label_bytes.size()));
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t[i].item<int64_t>(), f.label_bytes[i]) << "label " << i;
}

TEST(Idx, PlainRoundTrip) {
  TempDir dir;
  auto f = make_idx(5, 3, 4);
  write_bytes(dir.file("img"), f.images);
  write_bytes(dir.file("lab"), f.labels);
  expect_images(data::read_idx_images(dir.file("img")), f, 5, 3, 4);
  expect_labels(data::read_idx_labels(dir.file("lab")), f);
}

TEST(Idx, GzipRoundTripDetectedByContent) {
  TempDir dir;
  auto f = make_idx(7, 5, 2, 2);
  // Gzip content under a plain name and plain content under a .gz name: both read by content.
  write_bytes(dir.file("img"), gzip(f.images));
  write_bytes(dir.file("lab.gz"), f.labels);
  expect_images(data::read_idx_images(dir.file("img")), f, 7, 5, 2);
  expect_labels(data::read_idx_labels(dir.file("lab.gz")), f);
  // Concatenated gzip members are one stream.
  const std::string half = f.images.substr(0, 20);
  write_bytes(dir.file("two.gz"), gzip(half) + gzip(f.images.substr(20)));
  expect_images(data::read_idx_images(dir.file("two.gz")), f, 7, 5, 2);
}

TEST(Idx, LoadMnistFormatGzAndPlainPreference) {
  TempDir dir;
  auto train = make_idx(6, 4, 4, 3), test = make_idx(3, 4, 4, 4), other = make_idx(6, 4, 4, 5);
  write_bytes(dir.file("train-images-idx3-ubyte.gz"), gzip(other.images));  // shadowed by the plain file
  write_bytes(dir.file("train-images-idx3-ubyte"), train.images);
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(train.labels));
  write_bytes(dir.file("t10k-images-idx3-ubyte.gz"), gzip(test.images));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), test.labels);
  auto tr = data::load_mnist_format(dir.path(), true);
  expect_images(tr.images, train, 6, 4, 4);
  expect_labels(tr.labels, train);
  EXPECT_EQ(tr.size(), 6);
  auto te = data::load_mnist_format(dir.path(), false);
  expect_images(te.images, test, 3, 4, 4);
  expect_labels(te.labels, test);
}

TEST(Idx, TruncatedPlainAndGzip) {
  TempDir dir;
  auto f = make_idx(10, 4, 5);  // 16 + 200 bytes
  write_bytes(dir.file("cut"), f.images.substr(0, 100));
  expect_error<DataError>(
      [&] { data::read_idx_images(dir.file("cut")); },
      {dir.file("cut"), "truncated at byte 100 of the file", "expected 216 bytes (header 16 + 10 images of 4x5)"});
  write_bytes(dir.file("cut.gz"), gzip(f.images.substr(0, 150)));
  expect_error<DataError>(
      [&] { data::read_idx_images(dir.file("cut.gz")); },
      {dir.file("cut.gz"), "truncated at byte 150 of the uncompressed stream", "expected 216 bytes"});
  write_bytes(dir.file("lab"), f.labels.substr(0, 6));  // inside the header
  expect_error<DataError>([&] { data::read_idx_labels(dir.file("lab")); }, {dir.file("lab"), "truncated at byte 6"});
  // A gzip file cut in the middle of its compressed stream.
  const std::string gz = gzip(f.images);
  write_bytes(dir.file("half.gz"), gz.substr(0, gz.size() / 2));
  expect_error<DataError>(
      [&] { data::read_idx_images(dir.file("half.gz")); },
      {dir.file("half.gz"), "cut off at compressed byte " + std::to_string(gz.size() / 2), "truncated"});
}

TEST(Idx, CorruptGzipData) {
  TempDir dir;
  auto f = make_idx(10, 8, 8);
  std::string gz = gzip(f.images);
  gz[gz.size() - 6] ^= 0x55;  // inside the CRC-32 trailer
  write_bytes(dir.file("crc.gz"), gz);
  expect_error<DataError>([&] { data::read_idx_images(dir.file("crc.gz")); },
                          {dir.file("crc.gz"), "corrupt gzip data", "incorrect data check"});
  write_bytes(dir.file("tail.gz"), gzip(f.images) + "xyz");
  expect_error<DataError>([&] { data::read_idx_images(dir.file("tail.gz")); },
                          {dir.file("tail.gz"), "3 unexpected bytes after the gzip stream"});
}

TEST(Idx, BadMagic) {
  TempDir dir;
  auto f = make_idx(2, 2, 2);
  write_bytes(dir.file("labels-as-images"), f.labels);
  expect_error<DataError>([&] { data::read_idx_images(dir.file("labels-as-images")); },
                          {dir.file("labels-as-images"), "expected 0x00000803", "found 0x00000801"});
  write_bytes(dir.file("images-as-labels.gz"), gzip(f.images));
  expect_error<DataError>([&] { data::read_idx_labels(dir.file("images-as-labels.gz")); },
                          {"images-as-labels.gz", "expected 0x00000801", "found 0x00000803"});
}

TEST(Idx, TrailingGarbageAndImpossibleHeader) {
  TempDir dir;
  auto f = make_idx(3, 2, 2);
  write_bytes(dir.file("extra"), f.images + "abc");
  expect_error<DataError>([&] { data::read_idx_images(dir.file("extra")); },
                          {dir.file("extra"), "3 unexpected bytes after the data, at byte 28 of the file"});
  write_bytes(dir.file("extra.gz"), gzip(f.labels + "abcd"));
  expect_error<DataError>([&] { data::read_idx_labels(dir.file("extra.gz")); },
                          {"4 unexpected bytes after the data, at byte 11 of the uncompressed stream"});
  // A header promising 2^32-1 images of 65535x65535 in a 28-byte file fails before allocating.
  std::string huge;
  put_be32(huge, 0x00000803);
  put_be32(huge, 0xffffffff);
  put_be32(huge, 0xffff);
  put_be32(huge, 0xffff);
  write_bytes(dir.file("huge"), huge + "0123456789ab");
  expect_error<DataError>([&] { data::read_idx_images(dir.file("huge")); }, {dir.file("huge"), "truncated at byte 28"});
  write_bytes(dir.file("huge.gz"), gzip(huge));
  expect_error<DataError>([&] { data::read_idx_images(dir.file("huge.gz")); }, {"cannot hold that many"});
}

TEST(Idx, CountMismatchAndMissingFiles) {
  TempDir dir;
  auto f = make_idx(5, 2, 2), g = make_idx(4, 2, 2);
  write_bytes(dir.file("train-images-idx3-ubyte"), f.images);
  write_bytes(dir.file("train-labels-idx1-ubyte.gz"), gzip(g.labels));
  expect_error<DataError>([&] { data::load_mnist_format(dir.path(), true); },
                          {"train-images-idx3-ubyte holds 5 images", "train-labels-idx1-ubyte.gz holds 4 labels"});
  expect_error<DataError>([&] { data::load_mnist_format(dir.path(), false); },
                          {dir.path(), "t10k-images-idx3-ubyte or t10k-images-idx3-ubyte.gz"});
  std::remove(dir.file("train-labels-idx1-ubyte.gz").c_str());
  expect_error<DataError>([&] { data::load_mnist_format(dir.path(), true); },
                          {"no train-labels-idx1-ubyte or train-labels-idx1-ubyte.gz"});
  expect_error<DataError>([&] { data::read_idx_labels(dir.file("nothing")); }, {dir.file("nothing"), "cannot open"});
}

// The real data set, installed by scripts/install-deps.sh (dataset-fashion-mnist).
TEST(Idx, RealFashionMnist) {
  const std::string kFashionMnistDir = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist
  ASSERT_TRUE(std::filesystem::exists(kFashionMnistDir))
      << kFashionMnistDir << " is missing: run scripts/install-deps.sh (package dataset-fashion-mnist)";
  const auto t0 = std::chrono::steady_clock::now();
  auto train = data::load_mnist_format(kFashionMnistDir, true);
  auto test = data::load_mnist_format(kFashionMnistDir, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Fashion-MNIST train + test loaded in %.3f s\n", seconds);
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_TRUE(at::equal(at::bincount(train.labels), at::full({10}, 6000, at::kLong)));
  EXPECT_TRUE(at::equal(at::bincount(test.labels), at::full({10}, 1000, at::kLong)));
  // Pixels are real images, not zeros: the training set's mean is 0.2860 * 255
  // (the published normalisation constant, to 4 digits: within 5e-5; 1e-3 still
  // rejects zeros, noise or another data set such as MNIST's 0.1307).
  EXPECT_NEAR(train.images.to(at::kDouble).mean().item<double>() / 255, 0.2860, 1e-3);
  // How fast it loads is a benchmark's business, not a pass/fail check here.
}

}  // namespace
}  // namespace ddp::testing
