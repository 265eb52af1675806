// CIFAR-10 binary batches: 3073-byte records (label, then R, G, B planes of 32x32).
#include "ddp/data/cifar10.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "byte_reader.h"

namespace ddp::data {
namespace {

constexpr int64_t kPixels = 3 * 32 * 32;
constexpr int64_t kRecord = 1 + kPixels;
constexpr const char* kAdvice = "; regenerate or reinstall the file";

}  // namespace

ImageDataset read_cifar10_batch(const std::string& path) {
  detail::ByteReader in(path);
  std::string bytes = in.read_all();
  const auto size = static_cast<int64_t>(bytes.size());
  const std::string where = " of " + in.stream_name();
  if (size == 0) throw DataError(path + ": empty" + where + ": expected 3073-byte CIFAR-10 records" + kAdvice);
  const int64_t n = size / kRecord;
  if (size % kRecord != 0)
    throw DataError(path + ": size " + std::to_string(size) + " bytes" + where +
                    " is not a multiple of 3073 (1 label byte + 3072 pixel bytes per record): " + std::to_string(n) +
                    " full records and " + std::to_string(size % kRecord) + " leftover bytes starting at byte " +
                    std::to_string(n * kRecord) + "; the file is truncated or not a CIFAR-10 batch" + kAdvice);
  at::Tensor records = at::from_blob(bytes.data(), {n, kRecord}, at::kByte);
  at::Tensor labels = records.select(1, 0).to(at::kLong);
  at::Tensor bad = (labels > 9).nonzero();
  if (bad.numel() > 0) {
    const int64_t i = bad[0][0].item<int64_t>();
    throw DataError(path + ": record " + std::to_string(i) + " (byte " + std::to_string(i * kRecord) + where +
                    ") has label " + std::to_string(labels[i].item<int64_t>()) +
                    "; CIFAR-10 labels are 0..9 (is this a CIFAR-100 file?)" + kAdvice);
  }
  // clone, not contiguous(): with one record the slice is already contiguous and would still point into `bytes`.
  at::Tensor images = records.narrow(1, 1, kPixels).clone(at::MemoryFormat::Contiguous).view({n, 3, 32, 32});
  return {images, labels};
}

ImageDataset load_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  // Find every file before reading any, so that a missing one fails at once.
  std::vector<std::string> paths;
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    std::string found = detail::plain_or_gz(path);
    if (found.empty())
      throw DataError(dir + ": no " + name + " or " + name + ".gz (looked for " + path + " and " + path +
                      ".gz); the directory must hold CIFAR-10's binary batches (data_batch_1..5 and test_batch, "
                      ".bin or .bin.gz)");
    paths.push_back(found);
  }
  std::vector<at::Tensor> images, labels;
  for (const auto& path : paths) {
    ImageDataset part = read_cifar10_batch(path);
    images.push_back(part.images);
    labels.push_back(part.labels);
  }
  if (paths.size() == 1) return {images[0], labels[0]};
  return {at::cat(images), at::cat(labels)};
}

}  // namespace ddp::data
