#include "supervise/error_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
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
  if (j.contains("caused_by_rank") && j["caused_by_rank"].is_number_integer())
    r.caused_by_rank = j["caused_by_rank"].get<int>();
  if (j.contains("backtrace") && j["backtrace"].is_array())
    for (const auto& frame : j["backtrace"])
      if (frame.is_string()) r.backtrace.push_back(frame.get<std::string>());
  return r;
}

namespace {

constexpr char kPrefix[] = "ddprun-errors-";

void remove_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((dir + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

int remove_stale_error_dirs(const std::string& parent, double min_age_s) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
    const std::string dir = parent + "/" + e->d_name;
    const int fd = ::open((dir + "/.lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // not ours, or not yet locked
    struct stat st {};
    // Owned by this user, old enough, and nobody holds its lock: the owner is gone. The age from the fine clock:
    // a file's time (fine-grained on Linux 6.13+) can be a second ahead of time(), which reads a coarse clock.
    struct timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const bool owned = ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid();
    const double age = double(now.tv_sec - st.st_mtim.tv_sec) + 1e-9 * double(now.tv_nsec - st.st_mtim.tv_nsec);
    if (owned && (min_age_s <= 0 || age >= min_age_s) && ::flock(fd, LOCK_EX | LOCK_NB) == 0) stale.push_back(dir);
    ::close(fd);
  }
  ::closedir(d);
  for (const auto& dir : stale) remove_dir(dir);
  return static_cast<int>(stale.size());
}

ErrorFileDir::ErrorFileDir() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  remove_stale_error_dirs(parent);
  std::string pattern = parent + "/" + kPrefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    error_ = "cannot create a directory for the ranks' error files (" + pattern + "): " + std::strerror(errno);
    return;
  }
  dir_ = pattern;
  // Held (shared) until this process ends, however it ends; not inherited by the ranks.
  lock_fd_ = ::open((dir_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_SH);
}

ErrorFileDir::~ErrorFileDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (dir_.empty() || keep_) return;
  remove_dir(dir_);
}

std::string ErrorFileDir::file_for_rank(int rank) const {
  return dir_.empty() ? "" : dir_ + "/error-rank" + std::to_string(rank) + ".json";
}

std::string ErrorFileDir::rank_template() const { return dir_.empty() ? "" : dir_ + "/error-rank{rank}.json"; }

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

std::unique_ptr<ErrorFileDir> error_dir_for(const std::string& attempt_dir) {
  return attempt_dir.empty() ? std::make_unique<ErrorFileDir>() : std::make_unique<ErrorFileDir>(attempt_dir);
}

}  // namespace ddprun
