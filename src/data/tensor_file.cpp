#include "tensor_file.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "byte_reader.h"
#include "ddp/data/data_error.h"
#include "ddp/errors.h"
#include "dist/atomic_file.h"

namespace ddp::data::detail {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'S', 'H', 'A', 'R', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304;
constexpr const char* kRewrite = "; delete it and write the shards again";

// The dtypes the format knows, by a code that never changes.
constexpr std::pair<uint32_t, at::ScalarType> kDtypes[] = {
    {1, at::kByte}, {2, at::kChar},  {3, at::kShort},  {4, at::kInt},  {5, at::kLong},
    {6, at::kHalf}, {7, at::kFloat}, {8, at::kDouble}, {9, at::kBool}, {10, at::kBFloat16}};

uint32_t dtype_code(at::ScalarType t) {
  for (auto [code, type] : kDtypes)
    if (type == t) return code;
  throw ddp::InvalidArgument(std::string("shard files cannot hold dtype ") + c10::toString(t) +
                             "; convert to float32, uint8, int64, ... first");
}

uint32_t crc_bytes(uint32_t crc, const void* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(p), n));
}

// The file's bytes go to an AtomicFile (replaced whole or not at all) through a CRC-32 of everything written.
class CrcFile {
 public:
  explicit CrcFile(const std::string& path) : file_(path) {}
  void write(const void* p, size_t n) {
    file_.write(p, n);
    crc_ = crc_bytes(crc_, p, n);
  }
  template <typename T>
  void put(T v) {
    write(&v, sizeof v);
  }
  uint32_t crc() const { return crc_; }
  void commit() { file_.commit(); }

 private:
  ddp::detail::AtomicFile file_;
  uint32_t crc_ = 0;
};

// Reads the fields of a file front to back, checking each against the file's size.
struct Reader {
  ByteReader in;
  uint32_t crc = 0;

  explicit Reader(const std::string& path) : in(path) {
    if (in.gzipped()) throw DataError(path + ": a gzip file, not a ddp shard file" + kRewrite);
  }
  void get(void* dst, size_t n, const std::string& what) {
    in.read_exact(dst, n, what + " at byte " + std::to_string(in.offset()));
    crc = crc_bytes(crc, dst, n);
  }
  template <typename T>
  T get(const std::string& what) {
    T v;
    get(&v, sizeof v, what);
    return v;
  }
  [[noreturn]] void corrupt(uint64_t at, const std::string& what) {
    throw DataError(in.path() + ": " + what + " at byte " + std::to_string(at) + kRewrite);
  }
};

}  // namespace

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kHalf:
      return "float16";
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kBool:
      return "bool";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(t);
  }
}

uint32_t crc32_of(const at::Tensor& t, uint32_t crc) {
  at::Tensor c = t.contiguous();
  return crc_bytes(crc, c.data_ptr(), c.nbytes());
}

uint32_t crc32_of(const std::string& bytes, uint32_t crc) { return crc_bytes(crc, bytes.data(), bytes.size()); }

void write_tensor_file(const std::string& path, const std::string& tag, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> data;
  for (const auto& t : tensors) {
    dtype_code(t.scalar_type());  // throws for an unknown dtype before anything is written
    data.push_back(t.contiguous());
  }
  CrcFile f(path);
  f.write(kMagic, sizeof kMagic);
  f.put<uint32_t>(kVersion);
  f.put<uint32_t>(kByteOrder);
  f.put<uint32_t>(static_cast<uint32_t>(tag.size()));
  f.write(tag.data(), tag.size());
  f.put<uint32_t>(static_cast<uint32_t>(data.size()));
  for (const auto& t : data) {
    f.put<uint32_t>(dtype_code(t.scalar_type()));
    f.put<uint32_t>(static_cast<uint32_t>(t.dim()));
    for (int64_t s : t.sizes()) f.put<uint64_t>(static_cast<uint64_t>(s));
  }
  for (const auto& t : data) f.write(t.data_ptr(), t.nbytes());
  f.put<uint32_t>(f.crc());
  f.commit();
}

TensorFile read_tensor_file(const std::string& path) {
  Reader r(path);
  char magic[8];
  r.get(magic, sizeof magic, "the 8-byte magic DDPSHARD");
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) r.corrupt(0, "not a ddp shard file: no magic DDPSHARD");
  if (uint32_t v = r.get<uint32_t>("the format version"); v != kVersion)
    r.corrupt(8, "format version " + std::to_string(v) + ", this build reads version " + std::to_string(kVersion));
  if (uint32_t bom = r.get<uint32_t>("the byte-order mark"); bom != kByteOrder)
    r.corrupt(12, "byte-order mark " + hex32(bom) + " instead of " + hex32(kByteOrder) +
                      " (written on a machine of another byte order, or corrupt)");
  TensorFile out;
  const uint64_t size = r.in.file_size();
  const auto tag_size = r.get<uint32_t>("the tag length");
  if (tag_size > size) r.corrupt(16, "tag length " + std::to_string(tag_size) + " exceeds the file");
  out.tag.resize(tag_size);
  r.get(out.tag.data(), tag_size, "a tag of " + std::to_string(tag_size) + " bytes");
  const auto count = r.get<uint32_t>("the tensor count");
  if (count > 64) r.corrupt(r.in.offset() - 4, "tensor count " + std::to_string(count) + " (at most 64)");
  unsigned __int128 data_bytes = 0;
  std::vector<std::pair<at::ScalarType, std::vector<int64_t>>> shapes;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t at = r.in.offset();
    const auto code = r.get<uint32_t>("tensor " + std::to_string(i) + "'s dtype");
    const auto* known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](auto& d) { return d.first == code; });
    if (known == std::end(kDtypes)) r.corrupt(at, "unknown dtype code " + std::to_string(code));
    const auto ndim = r.get<uint32_t>("tensor " + std::to_string(i) + "'s rank");
    if (ndim > 16) r.corrupt(at + 4, "tensor rank " + std::to_string(ndim) + " (at most 16)");
    unsigned __int128 bytes = c10::elementSize(known->second);
    std::vector<int64_t> sizes;
    for (uint32_t d = 0; d < ndim; ++d) {
      const auto s = r.get<uint64_t>("tensor " + std::to_string(i) + "'s sizes");
      if (s > (uint64_t{1} << 48)) r.corrupt(r.in.offset() - 8, "size " + std::to_string(s) + " is implausible");
      sizes.push_back(static_cast<int64_t>(s));
      bytes *= s;
      if (bytes > size) r.corrupt(at, "tensor " + std::to_string(i) + " would be larger than the whole file");
    }
    data_bytes += bytes;
    shapes.emplace_back(known->second, std::move(sizes));
  }
  // The rest of the file: the data and the 4-byte checksum, nothing more or less.
  const unsigned __int128 expected = r.in.offset() + data_bytes + 4;
  if (expected != size) {
    const std::string want = std::to_string(static_cast<uint64_t>(expected)) + " bytes (header " +
                             std::to_string(r.in.offset()) + " + data " +
                             std::to_string(static_cast<uint64_t>(data_bytes)) + " + checksum 4)";
    if (expected > size)
      throw DataError(path + ": truncated at byte " + std::to_string(size) + " of the file: expected " + want +
                      kRewrite);
    throw DataError(path + ": " + std::to_string(size - static_cast<uint64_t>(expected)) +
                    " unexpected bytes after byte " + std::to_string(static_cast<uint64_t>(expected)) + ": expected " +
                    want + kRewrite);
  }
  for (auto& [type, sizes] : shapes) {
    at::Tensor t = at::empty(sizes, type);
    r.get(t.data_ptr(), t.nbytes(), std::to_string(t.nbytes()) + " bytes of tensor data");
    out.tensors.push_back(t);
  }
  const uint32_t computed = r.crc;
  const auto stored = r.get<uint32_t>("the checksum");
  if (stored != computed)
    throw DataError(
        path + ": checksum mismatch: the CRC-32 stored in its last 4 bytes is " + hex32(stored) +
        ", the one computed over bytes 0.." + std::to_string(size - 5) + " is " + hex32(computed) +
        ": the file is corrupt: some byte in that range changed after it was written (a CRC-32 cannot say which)" +
        kRewrite);
  return out;
}

}  // namespace ddp::data::detail
