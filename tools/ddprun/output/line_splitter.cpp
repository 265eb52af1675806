#include "output/line_splitter.h"

#include <cstring>

namespace ddprun {

void LineSplitter::feed(const char* data, size_t size, const Callback& emit) {
  const char* end = data + size;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    size_t take = nl != nullptr ? static_cast<size_t>(nl - data) : static_cast<size_t>(end - data);
    // Never let a line without newline grow beyond max_line_: once more
    // bytes of the same line arrive than fit, emit the full buffer as a piece.
    size_t room = max_line_ - buffer_.size();
    if (take > room) {
      buffer_.append(data, room);
      data += room;
      emit(buffer_);
      buffer_.clear();
      continue;
    }
    if (nl == nullptr) {
      buffer_.append(data, take);
      return;
    }
    if (buffer_.empty()) {
      emit(std::string_view(data, take));  // common case: no copy
    } else {
      buffer_.append(data, take);
      emit(buffer_);
      buffer_.clear();
    }
    data = nl + 1;
  }
}

std::string_view LineSplitter::redrawn() const {
  const size_t cr = buffer_.rfind('\r');
  if (cr == std::string::npos) return {};
  return std::string_view(buffer_).substr(cr + 1);
}

std::string_view shown_text(std::string_view line) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t cr = line.rfind('\r');
  return cr == std::string_view::npos ? line : line.substr(cr + 1);
}

void LineSplitter::finish(const Callback& emit) {
  if (!buffer_.empty()) {
    emit(buffer_);
    buffer_.clear();
  }
}

void TailBuffer::add(std::string_view line) {
  if (capacity_ == 0) return;
  if (line.size() > max_chars_) {
    lines_.emplace_back(std::string(line.substr(0, max_chars_)) + "...");
  } else {
    lines_.emplace_back(line);
  }
  while (lines_.size() > capacity_) lines_.pop_front();
}

}  // namespace ddprun
