#include "error_files.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ddprun {

std::optional<ErrorRecord> parse_error_record(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_string() || !j.contains("timestamp_us") ||
      !j["timestamp_us"].is_number_integer())
    return std::nullopt;
  ErrorRecord r;
  r.message = j["message"].get<std::string>();
  r.timestamp_us = j["timestamp_us"].get<long long>();
  if (j.contains("rank") && j["rank"].is_number_integer()) r.rank = j["rank"].get<int>();
  if (j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<long>();
  if (j.contains("exit_code") && j["exit_code"].is_number_integer()) r.exit_code = j["exit_code"].get<int>();
  if (j.contains("backtrace") && j["backtrace"].is_array())
    for (const auto& frame : j["backtrace"])
      if (frame.is_string()) r.backtrace.push_back(frame.get<std::string>());
  return r;
}

ErrorFileDir::ErrorFileDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ddprun-errors-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    error_ = "cannot create a directory for the ranks' error files (" + pattern + "): " + std::strerror(errno);
    return;
  }
  dir_ = pattern;
}

ErrorFileDir::~ErrorFileDir() {
  if (dir_.empty() || keep_) return;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((dir_ + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir_.c_str());
}

std::string ErrorFileDir::file_for_rank(int rank) const {
  return dir_.empty() ? "" : dir_ + "/error-rank" + std::to_string(rank) + ".json";
}

std::string ErrorFileDir::shared_file() const { return dir_.empty() ? "" : dir_ + "/error.json"; }

std::vector<ErrorRecord> ErrorFileDir::read_all() const {
  std::vector<ErrorRecord> out;
  if (dir_.empty()) return out;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    if (auto record = parse_error_record(text.str())) out.push_back(*record);
  }
  ::closedir(d);
  return out;
}

}  // namespace ddprun
