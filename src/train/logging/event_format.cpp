#include "train/logging/event_format.h"

#include <array>
#include <cmath>
#include <cstring>

namespace ddp::train::detail {
namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78u;  // reflected

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kCastagnoli : c >> 1;
    table[i] = c;
  }
  return table;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void ProtoEncoder::varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7Fu) | 0x80u));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void ProtoEncoder::key(uint32_t field, WireType type) { varint((uint64_t{field} << 3) | static_cast<uint32_t>(type)); }

void ProtoEncoder::fixed64_field(uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(field, WireType::kFixed64);
  put_le(out_, bits, 8);
}

void ProtoEncoder::fixed32_field(uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key(field, WireType::kFixed32);
  put_le(out_, bits, 4);
}

void ProtoEncoder::int64_field(uint32_t field, int64_t v) {
  key(field, WireType::kVarint);
  varint(static_cast<uint64_t>(v));
}

void ProtoEncoder::bytes_field(uint32_t field, const std::string& bytes) {
  key(field, WireType::kLengthDelimited);
  varint(bytes.size());
  out_ += bytes;
}

std::string version_event(double wall_time, const std::string& file_version) {
  ProtoEncoder event;
  if (wall_time != 0 || std::signbit(wall_time)) event.fixed64_field(1, wall_time);
  event.bytes_field(3, file_version);
  return event.bytes();
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  ProtoEncoder v;
  v.bytes_field(1, tag);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (bits != 0) v.fixed32_field(2, value);  // proto3 leaves out +0.0 (and keeps -0.0)
  ProtoEncoder summary;
  summary.bytes_field(1, v.bytes());
  ProtoEncoder event;
  if (wall_time != 0 || std::signbit(wall_time)) event.fixed64_field(1, wall_time);
  if (step != 0) event.int64_field(2, step);
  event.bytes_field(5, summary.bytes());
  return event.bytes();
}

std::string tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  std::string length;
  put_le(length, data.size(), 8);
  out += length;
  put_le(out, mask_crc(crc32c(length.data(), length.size())), 4);
  out += data;
  put_le(out, mask_crc(crc32c(data.data(), data.size())), 4);
  return out;
}

}  // namespace ddp::train::detail
