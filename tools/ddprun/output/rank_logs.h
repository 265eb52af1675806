// --log-dir, --redirects, --tee: the ranks' lines in per-attempt files
// DIR/attempt_<k>/<rank>/stdout.log and stderr.log (torchrun's layout, roughly).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "cli/options.h"
#include "supervise/supervisor.h"

namespace ddprun {

class RankLogs {
 public:
  // No files unless options.log_dir is set; then DIR/attempt_<attempt> is
  // created at once (error() says why when it cannot be).
  RankLogs(const Options& options, int attempt);
  ~RankLogs();
  RankLogs(const RankLogs&) = delete;
  RankLogs& operator=(const RankLogs&) = delete;

  // DIR/attempt_<k>, or empty without --log-dir or when it could not be made.
  const std::string& attempt_dir() const { return dir_; }
  const std::string& error() const { return error_; }
  // Whether lines of this stream are printed on ddprun's console.
  bool to_console(Stream stream) const;
  // Creates DIR/attempt_<k>/<rank>/ and the files of the logged streams.
  void open_rank(int rank);
  // Appends the line to the rank's file when its stream is logged.
  void write(int rank, Stream stream, std::string_view line);

 private:
  bool logged(Stream stream) const;
  int redirects_ = 0, tee_ = 0;
  std::string dir_, error_;
  bool write_failed_ = false;
  std::map<std::pair<int, int>, int> fds_;  // (rank, stream) -> fd
};

}  // namespace ddprun
