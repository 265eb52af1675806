// Metrics as JSON lines: one JSON object per line, easy to read back with
// pandas.read_json(path, lines=True), jq or a few lines of any language.
//
//   ddp::train::JsonlWriter log("runs/mnist/metrics.jsonl");
//   log.write({{"epoch", int64_t{3}}, {"split", "val"}, {"loss", 0.4213}, {"best", true}});
//   // -> {"epoch":3,"split":"val","loss":0.4213,"best":true}
//
// Doubles are written in their shortest form that reads back to the same
// value (always with a '.' or an exponent, so they stay floats); NaN and
// infinities become null. Each line reaches the file in one write() call as
// soon as write() is called, so a crash loses nothing already logged.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ddp::train {

class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path, bool append = true);  // creates parent dirs
  using Value = std::variant<int64_t, double, std::string, bool>;
  // One JSON object per line, keys in the given order, flushed after each line.
  // Throws ddp::InvalidArgument for a repeated key or a string that is not
  // UTF-8, and ddp::Error (with the path and errno text) when the write fails.
  void write(const std::vector<std::pair<std::string, Value>>& fields);

  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The JSON text of one line, without the newline (what write() appends).
std::string to_json_line(const std::vector<std::pair<std::string, JsonlWriter::Value>>& fields);

}  // namespace ddp::train
