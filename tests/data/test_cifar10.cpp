// CIFAR-10 binary batches: generated 7-record files, plain and gzip, and bad files.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "ddp/data/cifar10.h"

namespace ddp::testing {
namespace {

using data::DataError;

// Record i: label labels[i], pixel (c, y, x) = (i * 13 + c * 101 + y * 7 + x * 3) % 256.
uint8_t pixel(int64_t i, int64_t c, int64_t y, int64_t x) { return (i * 13 + c * 101 + y * 7 + x * 3) % 256; }

std::string records(const std::vector<int>& labels, int64_t first = 0) {
  std::string s;
  for (size_t k = 0; k < labels.size(); ++k) {
    s.push_back(static_cast<char>(labels[k]));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x) s.push_back(static_cast<char>(pixel(first + k, c, y, x)));
  }
  return s;
}

void expect_records(const data::ImageDataset& d, const std::vector<int>& labels) {
  const int64_t n = static_cast<int64_t>(labels.size());
  ASSERT_EQ(d.images.sizes(), (std::vector<int64_t>{n, 3, 32, 32}));
  ASSERT_EQ(d.images.scalar_type(), at::kByte);
  ASSERT_EQ(d.labels.scalar_type(), at::kLong);
  at::Tensor i = at::arange(n, at::kLong).view({n, 1, 1, 1}), c = at::arange(3, at::kLong).view({1, 3, 1, 1});
  at::Tensor y = at::arange(32, at::kLong).view({1, 1, 32, 1}), x = at::arange(32, at::kLong).view({1, 1, 1, 32});
  at::Tensor expected = (i * 13 + c * 101 + y * 7 + x * 3).remainder(256).to(at::kByte);
  EXPECT_TRUE(at::equal(d.images, expected)) << (d.images != expected).nonzero().narrow(0, 0, 3);
  EXPECT_TRUE(at::equal(d.labels, at::tensor(std::vector<int64_t>(labels.begin(), labels.end()))));
}

const std::vector<int> kSeven = {3, 0, 9, 1, 7, 7, 2};

TEST(Cifar10, SevenRecordsPlainAndGzip) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), records(kSeven));
  write_bytes(dir.file("b.bin.gz"), gzip(records(kSeven)));
  write_bytes(dir.file("c"), gzip(records(kSeven)));  // gzip is recognised by content, not by name
  expect_records(data::read_cifar10_batch(dir.file("a.bin")), kSeven);
  expect_records(data::read_cifar10_batch(dir.file("b.bin.gz")), kSeven);
  expect_records(data::read_cifar10_batch(dir.file("c")), kSeven);
}

TEST(Cifar10, LoadTrainInOrderAndTest) {
  TempDir dir;
  // data_batch_1..5 of 2, 1, 3, 1, 2 records, consecutive record numbers, mixed .bin and .bin.gz.
  const std::vector<std::vector<int>> parts = {{1, 2}, {3}, {4, 5, 6}, {7}, {8, 9}};
  std::vector<int> all;
  int64_t first = 0;
  for (size_t b = 0; b < parts.size(); ++b) {
    const std::string name = "data_batch_" + std::to_string(b + 1) + ".bin";
    if (b % 2 == 0)
      write_bytes(dir.file(name + ".gz"), gzip(records(parts[b], first)));
    else
      write_bytes(dir.file(name), records(parts[b], first));
    first += static_cast<int64_t>(parts[b].size());
    all.insert(all.end(), parts[b].begin(), parts[b].end());
  }
  // A plain file shadows its .gz twin.
  write_bytes(dir.file("data_batch_2.bin.gz"), gzip(records({0, 0, 0}, 100)));
  expect_records(data::load_cifar10(dir.path(), true), all);
  write_bytes(dir.file("test_batch.bin.gz"), gzip(records(kSeven)));
  expect_records(data::load_cifar10(dir.path(), false), kSeven);
}

TEST(Cifar10, SizeNotAMultipleOfRecords) {
  TempDir dir;
  write_bytes(dir.file("short.bin"), records(kSeven) + "12345");
  expect_error<DataError>([&] { data::read_cifar10_batch(dir.file("short.bin")); },
                          {dir.file("short.bin"), "size 21516 bytes of the file", "not a multiple of 3073",
                           "7 full records", "5 leftover bytes starting at byte 21511"});
  write_bytes(dir.file("cut.bin.gz"), gzip(records(kSeven).substr(0, 3073 * 2 + 100)));
  expect_error<DataError>(
      [&] { data::read_cifar10_batch(dir.file("cut.bin.gz")); },
      {"cut.bin.gz", "of the uncompressed stream", "2 full records", "100 leftover bytes starting at byte 6146"});
  write_bytes(dir.file("empty.bin"), "");
  expect_error<DataError>([&] { data::read_cifar10_batch(dir.file("empty.bin")); }, {dir.file("empty.bin"), "empty"});
}

TEST(Cifar10, LabelAboveNine) {
  TempDir dir;
  std::vector<int> labels = kSeven;
  labels[3] = 12;
  labels[5] = 99;
  write_bytes(dir.file("bad.bin"), records(labels));
  expect_error<DataError>([&] { data::read_cifar10_batch(dir.file("bad.bin")); },
                          {dir.file("bad.bin"), "record 3 (byte 9219 of the file) has label 12", "0..9"});
  write_bytes(dir.file("bad.bin.gz"), gzip(records(labels)));
  expect_error<DataError>([&] { data::read_cifar10_batch(dir.file("bad.bin.gz")); },
                          {"record 3 (byte 9219 of the uncompressed stream) has label 12"});
}

TEST(Cifar10, MissingFiles) {
  TempDir dir;
  for (int b = 1; b <= 4; ++b) write_bytes(dir.file("data_batch_" + std::to_string(b) + ".bin"), records({1}));
  expect_error<DataError>([&] { data::load_cifar10(dir.path(), true); },
                          {dir.path(), "no data_batch_5.bin or data_batch_5.bin.gz"});
  expect_error<DataError>([&] { data::load_cifar10(dir.path(), false); }, {"no test_batch.bin or test_batch.bin.gz"});
  expect_error<DataError>([&] { data::read_cifar10_batch(dir.file("nope.bin")); },
                          {dir.file("nope.bin"), "cannot open"});
}

}  // namespace
}  // namespace ddp::testing
