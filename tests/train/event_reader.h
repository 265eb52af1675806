// An event-file decoder for the tests, written from the format description and
// independent of the library's encoder: TFRecord framing with both masked
// CRC32C checks, then tensorflow.Event / Summary / Summary.Value by hand.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::test {

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;  // set in the first event only
  bool has_summary = false;
  std::vector<std::pair<std::string, float>> values;  // Summary.Value: tag, simple_value
};

// Bitwise CRC-32C, slow and obviously right.
inline uint32_t bitwise_crc32c(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

// Minimal protobuf reader over one message.
class ProtoReader {
 public:
  explicit ProtoReader(const std::string& bytes) : s_(bytes) {}
  bool done() const { return at_ >= s_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      need(1);
      auto b = static_cast<unsigned char>(s_[at_++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  uint64_t fixed(int bytes) {
    need(bytes);
    uint64_t v = read_le(s_, at_, bytes);
    at_ += bytes;
    return v;
  }
  std::string bytes() {
    uint64_t n = varint();
    need(n);
    std::string out = s_.substr(at_, n);
    at_ += n;
    return out;
  }

 private:
  void need(uint64_t n) const {
    if (at_ + n > s_.size()) throw std::runtime_error("protobuf field runs past the end of its message");
  }
  const std::string& s_;
  size_t at_ = 0;
};

inline std::pair<std::string, float> decode_value(const std::string& bytes) {
  std::pair<std::string, float> out{"", 0.0f};
  ProtoReader r(bytes);
  while (!r.done()) {
    uint64_t key = r.varint();
    if (key == (1 << 3 | 2)) {
      out.first = r.bytes();
    } else if (key == (2 << 3 | 5)) {
      auto bits = static_cast<uint32_t>(r.fixed(4));
      std::memcpy(&out.second, &bits, 4);
    } else {
      throw std::runtime_error("unexpected Summary.Value field key " + std::to_string(key));
    }
  }
  return out;
}

inline DecodedEvent decode_event(const std::string& bytes) {
  DecodedEvent ev;
  ProtoReader r(bytes);
  while (!r.done()) {
    uint64_t key = r.varint();
    if (key == (1 << 3 | 1)) {
      uint64_t bits = r.fixed(8);
      std::memcpy(&ev.wall_time, &bits, 8);
    } else if (key == (2 << 3 | 0)) {
      ev.step = static_cast<int64_t>(r.varint());
    } else if (key == (3 << 3 | 2)) {
      ev.file_version = r.bytes();
    } else if (key == (5 << 3 | 2)) {
      ev.has_summary = true;
      std::string summary = r.bytes();
      ProtoReader sr(summary);
      while (!sr.done()) {
        if (sr.varint() != (1 << 3 | 2)) throw std::runtime_error("unexpected Summary field");
        ev.values.push_back(decode_value(sr.bytes()));
      }
    } else {
      throw std::runtime_error("unexpected Event field key " + std::to_string(key));
    }
  }
  return ev;
}

// Every record of an event file; throws, naming the offset, on a bad CRC or a cut record.
inline std::vector<DecodedEvent> read_events(const std::string& file) {
  std::vector<DecodedEvent> out;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = " at offset " + std::to_string(at);
    if (file.size() - at < 12) throw std::runtime_error("truncated record header" + where);
    std::string length_bytes = file.substr(at, 8);
    uint64_t length = read_le(file, at, 8);
    if (read_le(file, at + 8, 4) != masked(bitwise_crc32c(length_bytes)))
      throw std::runtime_error("length CRC mismatch" + where);
    if (file.size() - at - 12 < length + 4) throw std::runtime_error("truncated record data" + where);
    std::string data = file.substr(at + 12, length);
    if (read_le(file, at + 12 + length, 4) != masked(bitwise_crc32c(data)))
      throw std::runtime_error("data CRC mismatch" + where);
    out.push_back(decode_event(data));
    at += 12 + length + 4;
  }
  return out;
}

}  // namespace ddp::test
