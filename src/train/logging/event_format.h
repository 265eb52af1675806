// The bytes of a TensorBoard event file: CRC32C, TFRecord framing and a tiny
// protobuf encoder for tensorflow.Event / Summary / Summary.Value.
//
// TFRecord:  uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// Event:     wall_time double = 1, step int64 = 2, file_version string = 3, summary Summary = 5
// Summary:   repeated Value value = 1;  Value: tag string = 1, simple_value float = 2
// Fields are written in field-number order and, as proto3 does, a step of 0 and a
// simple_value of +0.0 are left out, so the bytes equal protobuf's own serialisation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::train::detail {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);

enum class WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends protobuf fields to a byte string.
class ProtoEncoder {
 public:
  void varint(uint64_t v);
  void key(uint32_t field, WireType type);
  void fixed64_field(uint32_t field, double v);
  void fixed32_field(uint32_t field, float v);
  void int64_field(uint32_t field, int64_t v);  // varint of the two's complement
  void bytes_field(uint32_t field, const std::string& bytes);
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Serialised tensorflow.Event messages.
std::string version_event(double wall_time, const std::string& file_version);
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

// One TFRecord holding `data`.
std::string tfrecord(const std::string& data);

}  // namespace ddp::train::detail
