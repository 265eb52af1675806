#include "output/rank_logs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "output/output.h"

namespace ddprun {

namespace {

int bit(Stream stream) { return stream == Stream::kOut ? 1 : 2; }

}  // namespace

RankLogs::RankLogs(const Options& options, int attempt) : redirects_(options.redirects), tee_(options.tee) {
  if (options.log_dir.empty()) return;
  const std::string dir = options.log_dir + "/attempt_" + std::to_string(attempt);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    error_ = "--log-dir: cannot create " + dir + ": " + ec.message();
    return;
  }
  dir_ = dir;
}

RankLogs::~RankLogs() {
  for (const auto& kv : fds_)
    if (kv.second >= 0) ::close(kv.second);
}

bool RankLogs::logged(Stream stream) const { return !dir_.empty() && ((redirects_ | tee_) & bit(stream)) != 0; }

bool RankLogs::to_console(Stream stream) const {
  // Redirected streams stay off the console unless they are also teed.
  return dir_.empty() || (redirects_ & bit(stream)) == 0 || (tee_ & bit(stream)) != 0;
}

void RankLogs::open_rank(int rank) {
  if (dir_.empty()) return;
  const std::string rank_dir = dir_ + "/" + std::to_string(rank);
  std::error_code ec;
  std::filesystem::create_directories(rank_dir, ec);
  for (Stream stream : {Stream::kOut, Stream::kErr}) {
    auto key = std::make_pair(rank, bit(stream));
    if (!logged(stream) || fds_.count(key) != 0) continue;
    const std::string path = rank_dir + (stream == Stream::kOut ? "/stdout.log" : "/stderr.log");
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && !write_failed_) {
      write_failed_ = true;
      report("warning: --log-dir: cannot open " + path + ": " + std::strerror(errno) +
             (to_console(stream) ? "" : "; the lines of this stream are lost"));
    }
    fds_[key] = fd;
  }
}

void RankLogs::write(int rank, Stream stream, std::string_view line) {
  if (!logged(stream)) return;
  auto it = fds_.find(std::make_pair(rank, bit(stream)));
  if (it == fds_.end()) {
    open_rank(rank);
    it = fds_.find(std::make_pair(rank, bit(stream)));
  }
  if (it == fds_.end() || it->second < 0) return;
  if (!write_line(it->second, "", line) && !write_failed_) {
    write_failed_ = true;
    report("warning: --log-dir: cannot write the log of rank " + std::to_string(rank) + ": " + std::strerror(errno));
  }
}

}  // namespace ddprun
