// A small binary container for a few tensors, written atomically and checked
// when read back; the format of the per-rank shard files. Private to data/.
//
//   offset  size  field
//   0       8     magic "DDPSHARD"
//   8       4     format version (1), little-endian like every number here
//   12      4     byte-order mark 0x01020304 (written natively; read back on another order: error)
//   16      4     tag length L, then L bytes of tag (the caller's identity string)
//           4     tensor count T, then per tensor: dtype code (4), rank R (4), R sizes (8 each)
//           ...   the tensors' raw bytes, contiguous, one after the other
//   end-4   4     CRC-32 (zlib) of every byte before it
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::data::detail {

struct TensorFile {
  std::string tag;
  std::vector<at::Tensor> tensors;
};

// Writes to a temporary file beside `path`, fsyncs it, renames it over `path`
// and fsyncs the directory. Throws ddp::Error on I/O failure (the temporary is
// removed) and ddp::InvalidArgument for a dtype the format does not know.
void write_tensor_file(const std::string& path, const std::string& tag, const std::vector<at::Tensor>& tensors);

// Reads a file written by write_tensor_file. Throws DataError naming the file
// and the byte offset when it is missing, truncated, of another format or
// version, or fails its checksum.
TensorFile read_tensor_file(const std::string& path);

// CRC-32 of a tensor's bytes (made contiguous first), continuing from `crc`.
uint32_t crc32_of(const at::Tensor& t, uint32_t crc = 0);
uint32_t crc32_of(const std::string& bytes, uint32_t crc = 0);

// "float32", "uint8", ...: the names this format uses for dtypes.
std::string dtype_name(at::ScalarType t);

}  // namespace ddp::data::detail
