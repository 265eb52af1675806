// Splits a byte stream into lines, and keeps the last lines of a stream.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// Longest piece emitted for a line that has no newline yet.
constexpr size_t kMaxLineBytes = 64 * 1024;

// Feed bytes in; every complete line (without its '\n') is passed to the
// callback. A line that grows beyond max_line bytes without a newline is
// emitted in pieces of max_line bytes; finish() emits a partial last line.
class LineSplitter {
 public:
  using Callback = std::function<void(std::string_view line)>;

  explicit LineSplitter(size_t max_line = kMaxLineBytes) : max_line_(max_line) {}

  void feed(const char* data, size_t size, const Callback& emit);
  // End of stream: emits what is left (a last line without '\n'), if any.
  void finish(const Callback& emit);
  size_t pending() const { return buffer_.size(); }
  // The unfinished line's text after its last '\r' when it has one (a progress bar redrawn in place), else "".
  std::string_view redrawn() const;

 private:
  size_t max_line_;
  std::string buffer_;
};

// What a terminal shows of a line redrawn with '\r': the text after its last '\r' (a trailing '\r' ignored).
std::string_view shown_text(std::string_view line);

// The last `capacity` lines of a stream, each cut to max_chars characters.
class TailBuffer {
 public:
  explicit TailBuffer(size_t capacity = 20, size_t max_chars = 1000) : capacity_(capacity), max_chars_(max_chars) {}

  void add(std::string_view line);
  std::vector<std::string> lines() const { return {lines_.begin(), lines_.end()}; }
  bool empty() const { return lines_.empty(); }

 private:
  size_t capacity_;
  size_t max_chars_;
  std::deque<std::string> lines_;
};

}  // namespace ddprun
