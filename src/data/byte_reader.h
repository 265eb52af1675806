// Reads a data file front to back, plain or gzip (detected by the magic bytes
// 1f 8b), tracking the offset in the uncompressed stream so that errors can
// say where a file ended or went wrong. Private to the data readers.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace ddp::data::detail {

class ByteReader {
 public:
  // Throws DataError if the file cannot be opened or is not a regular file.
  explicit ByteReader(const std::string& path);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the stream. Throws DataError
  // on a corrupt or cut-off gzip stream.
  size_t read(void* dst, size_t n);
  // Reads exactly n bytes or throws DataError "truncated at byte <offset> ...: expected <what>".
  void read_exact(void* dst, size_t n, const std::string& expected);
  // The rest of the stream.
  std::string read_all();
  // Bytes of the rest of the stream, read and discarded (to count trailing garbage).
  uint64_t skip_rest();

  const std::string& path() const { return path_; }
  bool gzipped() const { return gz_ != nullptr; }
  uint64_t offset() const { return offset_; }  // uncompressed bytes read so far
  // "the file" or "the uncompressed stream", for messages: "at byte 12 of the file".
  std::string stream_name() const;
  // An upper bound of the stream's length: the file size, or for gzip the most
  // a file of this size can inflate to (deflate's ratio is at most 1032:1).
  uint64_t max_size() const;
  uint64_t file_size() const { return file_size_; }

 private:
  struct Gzip;
  size_t read_gzip(unsigned char* dst, size_t n);
  void refill();

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t offset_ = 0;
  std::unique_ptr<Gzip> gz_;
};

// `path` if it is a regular file, else `path + ".gz"` if that is, else "".
std::string plain_or_gz(const std::string& path);

// "0x00000803"
std::string hex32(uint32_t v);

}  // namespace ddp::data::detail
