// idx files: a big-endian header (magic 0x0000TTDD: type TT, DD dimensions,
// then DD sizes of 4 bytes each) followed by the raw data. We read the ubyte
// type only: images [N, H, W] (magic 0x00000803) and labels [N] (0x00000801).
#include "ddp/data/idx.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "byte_reader.h"

namespace ddp::data {
namespace {

using detail::ByteReader;
using detail::hex32;

constexpr const char* kAdvice = "; regenerate or reinstall the file";

uint32_t big_endian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads the header of an idx file of `ndims` dimensions and returns the sizes.
std::vector<int64_t> read_header(ByteReader& in, uint32_t magic, const char* kind) {
  const size_t ndims = magic & 0xff;
  const size_t header = 4 + 4 * ndims;
  std::vector<unsigned char> bytes(header);
  in.read_exact(bytes.data(), 4, "a " + std::to_string(header) + "-byte idx header (" + kind + ")");
  const uint32_t found = big_endian(bytes.data());
  if (found != magic)
    throw DataError(in.path() + ": bad magic number at byte 0: expected " + hex32(magic) + " (" + kind + "), found " +
                    hex32(found) + "; is this the right file (images and labels swapped?)");
  in.read_exact(bytes.data() + 4, header - 4, "a " + std::to_string(header) + "-byte idx header (" + kind + ")");
  std::vector<int64_t> dims;
  for (size_t d = 0; d < ndims; ++d) dims.push_back(big_endian(bytes.data() + 4 + 4 * d));
  return dims;
}

// Reads the `count` data bytes that follow the header into `dst` and checks
// that nothing follows them. Checks the size first: a corrupt header can
// promise terabytes, which must fail before allocating `dst`.
struct DataReader {
  ByteReader& in;
  unsigned __int128 count;
  std::string layout;  // "header 16 + 60000 images of 28x28"

  std::string expected() const {
    const unsigned __int128 t = total();
    return (t >> 63 ? std::string("over 2^63") : std::to_string(static_cast<uint64_t>(t))) + " bytes (" + layout + ")";
  }
  unsigned __int128 total() const { return in.offset() + count; }

  void check_fits() const {
    if (total() <= in.max_size()) return;
    if (!in.gzipped())
      throw DataError(in.path() + ": truncated at byte " + std::to_string(in.file_size()) + " of the file: expected " +
                      expected() + kAdvice);
    throw DataError(in.path() + ": the header promises " + expected() + " but a " + std::to_string(in.file_size()) +
                    "-byte gzip file cannot hold that many: truncated file or corrupt header" + kAdvice);
  }
  void read(void* dst) const {
    const std::string want = expected();
    const uint64_t end = static_cast<uint64_t>(total());
    in.read_exact(dst, static_cast<size_t>(count), want);
    if (const uint64_t extra = in.skip_rest())
      throw DataError(in.path() + ": " + std::to_string(extra) + " unexpected bytes after the data, at byte " +
                      std::to_string(end) + " of " + in.stream_name() + ": expected exactly " + want +
                      "; the file is corrupt or not an idx file" + kAdvice);
  }
};

}  // namespace

at::Tensor read_idx_images(const std::string& path) {
  ByteReader in(path);
  const auto dims = read_header(in, 0x00000803, "idx3 ubyte images");
  const int64_t n = dims[0], h = dims[1], w = dims[2];
  DataReader data{in, static_cast<unsigned __int128>(n) * h * w,
                  "header 16 + " + std::to_string(n) + " images of " + std::to_string(h) + "x" + std::to_string(w)};
  data.check_fits();
  at::Tensor images = at::empty({n, 1, h, w}, at::kByte);
  data.read(images.data_ptr());
  return images;
}

at::Tensor read_idx_labels(const std::string& path) {
  ByteReader in(path);
  const int64_t n = read_header(in, 0x00000801, "idx1 ubyte labels")[0];
  DataReader data{in, static_cast<unsigned __int128>(n), "header 8 + " + std::to_string(n) + " labels"};
  data.check_fits();
  at::Tensor labels = at::empty({n}, at::kByte);
  data.read(labels.data_ptr());
  return labels.to(at::kLong);
}

ImageDataset load_mnist_format(const std::string& dir, bool train, int64_t num_classes) {
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& name) {
    const std::string path = dir + "/" + name;
    std::string found = detail::plain_or_gz(path);
    if (found.empty())
      throw DataError(dir + ": no " + name + " or " + name + ".gz (looked for " + path + " and " + path +
                      ".gz); install dataset-fashion-mnist (scripts/install-deps.sh) or pass the directory that "
                      "holds the MNIST-format files");
    return found;
  };
  const std::string images_path = find(prefix + "-images-idx3-ubyte");
  const std::string labels_path = find(prefix + "-labels-idx1-ubyte");
  ImageDataset out{read_idx_images(images_path), read_idx_labels(labels_path)};
  if (out.images.size(0) != out.labels.size(0))
    throw DataError(dir + ": " + images_path + " holds " + std::to_string(out.images.size(0)) + " images but " +
                    labels_path + " holds " + std::to_string(out.labels.size(0)) +
                    " labels; the two files must come from the same data set");
  if (num_classes > 0) {
    at::Tensor outside = ((out.labels < 0) | (out.labels >= num_classes)).nonzero();
    if (outside.numel() > 0) {
      const int64_t record = outside[0][0].item<int64_t>();
      throw DataError(labels_path + ": record " + std::to_string(record) + " (counting from 0) has label " +
                      std::to_string(out.labels[record].item<int64_t>()) + ", outside the " +
                      std::to_string(num_classes) + " classes 0.." + std::to_string(num_classes - 1) + " (" +
                      std::to_string(outside.size(0)) + " such record(s)); the file is corrupt or of another data set");
    }
  }
  return out;
}

}  // namespace ddp::data
