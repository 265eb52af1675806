// JsonlWriter: JSON text by hand (escaping, shortest round-trip doubles,
// UTF-8 checks), one write(2) per line on an O_APPEND descriptor.
#include "ddp/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "ddp/errors.h"
#include "train/logging/file_io.h"

namespace ddp::train {
namespace {

const char* const kWho = "JsonlWriter";

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t invalid_utf8_at(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;  // overlong, surrogate
    i += len;
  }
  return std::string::npos;
}

void append_string(std::string& out, const std::string& s, const std::string& key, const char* what) {
  size_t bad = invalid_utf8_at(s);
  if (bad != std::string::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(s[bad]));
    throw InvalidArgument(std::string("JsonlWriter: the ") + what + " of key \"" + key +
                          "\" is not valid UTF-8 (byte " + byte + " at offset " + std::to_string(bad) +
                          "); JSON text must be UTF-8");
  }
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back to v
  std::string text(buf, res.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";  // stays a float when read back
  out += text;
}

}  // namespace

std::string to_json_line(const std::vector<std::pair<std::string, JsonlWriter::Value>>& fields) {
  std::string out = "{";
  std::set<std::string> seen;
  for (const auto& [key, value] : fields) {
    if (!seen.insert(key).second)
      throw InvalidArgument("JsonlWriter: key \"" + key + "\" appears twice in one line; keys must be unique");
    if (out.size() > 1) out.push_back(',');
    append_string(out, key, key, "name");
    out.push_back(':');
    if (auto i = std::get_if<int64_t>(&value)) {
      out += std::to_string(*i);
    } else if (auto d = std::get_if<double>(&value)) {
      append_double(out, *d);
    } else if (auto s = std::get_if<std::string>(&value)) {
      append_string(out, *s, key, "value");
    } else {
      out += std::get<bool>(value) ? "true" : "false";
    }
  }
  out.push_back('}');
  return out;
}

JsonlWriter::JsonlWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty()) throw InvalidArgument("JsonlWriter: path is empty; give a file such as \"runs/exp1/metrics.jsonl\"");
  detail::make_dirs(detail::parent_dir(path), kWho);
  fd_ = detail::open_file(path, O_CREAT | O_APPEND | (append ? 0 : O_TRUNC), kWho);
}

JsonlWriter::~JsonlWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlWriter::write(const std::vector<std::pair<std::string, Value>>& fields) {
  std::string line = to_json_line(fields);
  line.push_back('\n');
  detail::write_all(fd_, line.data(), line.size(), path_, kWho);
}

}  // namespace ddp::train
