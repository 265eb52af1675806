#include "byte_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "ddp/data/data_error.h"

namespace ddp::data::detail {
namespace {

constexpr size_t kBufferSize = size_t{1} << 18;
constexpr const char* kAdvice = "; regenerate or reinstall the file";

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string plain_or_gz(const std::string& path) {
  if (is_regular(path)) return path;
  if (is_regular(path + ".gz")) return path + ".gz";
  return "";
}

struct ByteReader::Gzip {
  z_stream zs{};
  uint64_t fed = 0;   // compressed bytes read from the file (some may still wait in avail_in)
  bool done = false;  // the last member ended and nothing follows
  std::vector<unsigned char> in = std::vector<unsigned char>(kBufferSize);
};

ByteReader::ByteReader(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DataError(path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw DataError(path + ": not a regular file");
  file_size_ = static_cast<uint64_t>(st.st_size);
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw DataError(path + ": cannot open: " + std::strerror(errno));
  unsigned char magic[2];
  const size_t got = std::fread(magic, 1, 2, file_);
  std::rewind(file_);
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    gz_ = std::make_unique<Gzip>();
    if (inflateInit2(&gz_->zs, 15 + 16) != Z_OK) {  // 15 + 16: a 32 KiB window, gzip wrapper
      std::fclose(file_);
      throw DataError(path + ": zlib could not start (out of memory?)");
    }
  }
}

ByteReader::~ByteReader() {
  if (gz_) inflateEnd(&gz_->zs);
  if (file_) std::fclose(file_);
}

std::string ByteReader::stream_name() const { return gz_ ? "the uncompressed stream" : "the file"; }

uint64_t ByteReader::max_size() const { return gz_ ? file_size_ * 1032 + 1024 : file_size_; }

size_t ByteReader::read(void* dst, size_t n) {
  size_t got = 0;
  if (!gz_) {
    got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_))
      throw DataError(path_ + ": read error at byte " + std::to_string(offset_ + got) + ": " + std::strerror(errno));
  } else {
    got = read_gzip(static_cast<unsigned char*>(dst), n);
  }
  offset_ += got;
  return got;
}

// Moves what zlib has not consumed yet to the front and reads more behind it
// (nothing more at the end of the file).
void ByteReader::refill() {
  auto& buf = gz_->in;
  z_stream& zs = gz_->zs;
  if (zs.avail_in > 0 && zs.next_in != buf.data()) std::memmove(buf.data(), zs.next_in, zs.avail_in);
  const size_t kept = zs.avail_in;
  const size_t got = std::fread(buf.data() + kept, 1, buf.size() - kept, file_);
  if (got == 0 && std::ferror(file_))
    throw DataError(path_ + ": read error at compressed byte " + std::to_string(gz_->fed) + ": " +
                    std::strerror(errno));
  gz_->fed += got;
  zs.next_in = buf.data();
  zs.avail_in = static_cast<uInt>(kept + got);
}

size_t ByteReader::read_gzip(unsigned char* dst, size_t n) {
  Gzip& g = *gz_;
  z_stream& zs = g.zs;
  size_t got = 0;
  auto at_compressed = [&] { return std::to_string(g.fed - zs.avail_in); };
  auto uncompressed = [&] { return std::to_string(offset_ + got); };
  while (got < n && !g.done) {
    if (zs.avail_in == 0) refill();
    zs.next_out = dst + got;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(n - got, UINT_MAX));
    const uInt before = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    got += before - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (concatenated .gz files); anything else is garbage.
      if (zs.avail_in < 2) refill();
      if (zs.avail_in == 0) {
        g.done = true;
      } else if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
        inflateReset(&zs);
      } else {
        const uint64_t at = g.fed - zs.avail_in;
        throw DataError(path_ + ": " + std::to_string(file_size_ - at) +
                        " unexpected bytes after the gzip stream, at compressed byte " + std::to_string(at) +
                        ": expected the end of the file or another gzip member" + kAdvice);
      }
    } else if (rc == Z_BUF_ERROR) {  // no progress possible: zlib needs more input
      if (zs.avail_in == 0) refill();
      if (zs.avail_in == 0)
        throw DataError(path_ + ": gzip stream cut off at compressed byte " + at_compressed() + " (the end of the " +
                        std::to_string(file_size_) + "-byte file) after " + uncompressed() +
                        " uncompressed bytes: the file is truncated" + kAdvice);
    } else if (rc != Z_OK) {
      throw DataError(path_ + ": corrupt gzip data near compressed byte " + at_compressed() + " (uncompressed byte " +
                      uncompressed() + "): " + (zs.msg ? zs.msg : "zlib error " + std::to_string(rc)) + kAdvice);
    }
  }
  return got;
}

void ByteReader::read_exact(void* dst, size_t n, const std::string& expected) {
  const size_t got = read(dst, n);
  if (got < n)
    throw DataError(path_ + ": truncated at byte " + std::to_string(offset_) + " of " + stream_name() + ": expected " +
                    expected + kAdvice);
}

std::string ByteReader::read_all() {
  std::string out;
  size_t size = 0;
  // Plain: the rest of the file (+1 to see its end); gzip: grow by doubling.
  size_t chunk = gz_ ? std::max<size_t>(file_size_ * 2, 1 << 16) : file_size_ - std::min(offset_, file_size_) + 1;
  for (;;) {
    out.resize(size + chunk);
    const size_t got = read(out.data() + size, chunk);
    size += got;
    if (got < chunk) break;
    chunk = std::max<size_t>(size, 1 << 16);
  }
  out.resize(size);
  return out;
}

uint64_t ByteReader::skip_rest() {
  std::vector<char> buf(1 << 16);
  uint64_t total = 0;
  for (size_t got; (got = read(buf.data(), buf.size())) > 0;) total += got;
  return total;
}

}  // namespace ddp::data::detail
