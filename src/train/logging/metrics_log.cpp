// JsonlWriter: one JSON object per line (nlohmann-json writes the text: escaping,
// shortest round-trip doubles, UTF-8 checks), one write(2) per line on an
// O_APPEND descriptor.
#include "ddp/train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ddp/errors.h"
#include "train/logging/file_io.h"

namespace ddp::train {
namespace {

const char* const kWho = "JsonlWriter";

// nlohmann's complaint about `text`, or "" when it is valid UTF-8.
std::string utf8_problem(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return "";
  } catch (const nlohmann::json::type_error& e) {
    std::string what = e.what();
    const auto end = what.find("] ");
    return end == std::string::npos ? what : what.substr(end + 2);
  }
}

}  // namespace

std::string to_json_line(const std::vector<std::pair<std::string, JsonlWriter::Value>>& fields) {
  auto line = nlohmann::ordered_json::object();
  for (const auto& [key, value] : fields) {
    if (line.contains(key))
      throw InvalidArgument("JsonlWriter: key \"" + key + "\" appears twice in one line; keys must be unique");
    std::visit([&, &key = key](const auto& v) { line[key] = v; }, value);  // NaN and infinities are written as null
  }
  try {
    return line.dump();
  } catch (const nlohmann::json::type_error&) {  // a string that is not UTF-8: say which
    for (const auto& [key, value] : fields) {
      const std::string* text = std::get_if<std::string>(&value);
      for (auto [what, s] : {std::pair{"name", &key}, std::pair{"value", text}}) {
        if (s == nullptr) continue;
        if (std::string problem = utf8_problem(*s); !problem.empty())
          throw InvalidArgument(std::string("JsonlWriter: the ") + what + " of key \"" + key +
                                "\" is not valid UTF-8 (" + problem + "); JSON text must be UTF-8");
      }
    }
    throw;
  }
}

JsonlWriter::JsonlWriter(const std::string& path, bool append) : path_(path) {
  if (path.empty())
    throw InvalidArgument("JsonlWriter: path is empty; give a file such as \"runs/exp1/metrics.jsonl\"");
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
