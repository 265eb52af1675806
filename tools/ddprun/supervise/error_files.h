// The ranks' error files (TORCHELASTIC_ERROR_FILE, as torchrun): a temporary
// directory per run, one JSON record per failed rank (see
// include/ddp/dist/error_file.h for the writer), read back for the summary.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

struct ErrorRecord {
  int rank = -1;
  long pid = -1;
  long long timestamp_us = 0;  // wall clock, microseconds since the epoch
  int exit_code = -1;
  std::string message;
  std::vector<std::string> backtrace;  // where the error was thrown, innermost first (may be empty)
  int caused_by_rank = -1;             // >= 0: the rank stopped because that rank failed (ddp::PeerFailure)
};

// Parses one error file's text; nullopt when it is not a valid record.
std::optional<ErrorRecord> parse_error_record(const std::string& text);

// A fresh directory under $TMPDIR (else /tmp), removed with its files by the
// destructor. When it cannot be created, path() is empty and error() says why.
// Its owner holds a lock on "<dir>/.lock" while it lives, so the directories of
// a ddprun that was SIGKILLed (no destructor ran) are recognised and removed by
// the next ddprun that starts (remove_stale_error_dirs).
class ErrorFileDir {
 public:
  ErrorFileDir();
  // Uses the existing directory `dir` (--log-dir), which is kept.
  explicit ErrorFileDir(const std::string& dir) : dir_(dir), keep_(true) {}
  ~ErrorFileDir();
  ErrorFileDir(const ErrorFileDir&) = delete;
  ErrorFileDir& operator=(const ErrorFileDir&) = delete;

  const std::string& path() const { return dir_; }
  const std::string& error() const { return error_; }
  // "<dir>/error-rank<R>.json" (empty without a directory).
  std::string file_for_rank(int rank) const;
  // "<dir>/error-rank{rank}.json" for mpirun, which cannot give each rank a path
  // of its own: the writer puts its rank in place of "{rank}" (error_file.h).
  std::string rank_template() const;
  // Every valid record in the directory.
  std::vector<ErrorRecord> read_all() const;

 private:
  std::string dir_;
  std::string error_;
  bool keep_ = false;
  int lock_fd_ = -1;
};

// The attempt's error files: in `attempt_dir` (--log-dir's, kept) when it is set, else in a temporary directory.
std::unique_ptr<ErrorFileDir> error_dir_for(const std::string& attempt_dir);

// Removes the ddprun-errors-* directories under `parent` whose owner is gone (their lock is free) and whose lock
// file is older than `min_age_s` (a directory being created has no lock yet). Returns how many were removed.
int remove_stale_error_dirs(const std::string& parent, double min_age_s = 60);

}  // namespace ddprun
