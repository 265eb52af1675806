// Understanding mpirun's output: --tag-output prefixes and failure messages.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun {

struct TaggedLine {
  int rank = -1;
  bool is_stderr = false;  // <stderr> or <stddiag>
  std::string text;        // without any of mpirun's tags
};

// Sorts mpirun's lines ("[jobid,rank]<stdout>:text", "<stderr>", "<stddiag>") into the ranks' lines. mpirun
// tags each chunk a rank writes, so one of its lines can hold pieces of several ranks' lines, each behind its
// tag: "[1,0]<stdout>:part-0[1,1]<stdout>:part-1[1,0]<stdout>: end-0". A rank's piece waits for the rest of its
// line; the line ends with the piece that ends mpirun's line.
class MpiLineDemux {
 public:
  // nullopt for a line without a leading tag (mpirun's own messages); else the rank line it ends, without any of
  // mpirun's tags of this job (another job's are text).
  std::optional<TaggedLine> feed(std::string_view line);
  // At the end: the pieces still waiting, as lines.
  std::vector<TaggedLine> finish();

 private:
  std::map<std::pair<int, bool>, std::string> pending_;  // (rank, is_stderr): the start of its line
};

struct MpiFailure {
  int rank = -1;
  long pid = -1;       // -1 when unknown (OpenMPI often reports PID 0)
  int exit_code = -1;  // -1 when unknown
  int signal = 0;      // 0 when not killed by a signal
};

// Feed mpirun's untagged lines in order; remembers the first failed rank
// reported by OpenMPI 4 messages such as
//   "  Process name: [[12345,1],1]" followed by "  Exit code:    3", or
//   "mpirun noticed that process rank 1 with PID 0 on node x exited on signal 9 (Killed)."
class MpiFailureScanner {
 public:
  void feed(std::string_view line);
  // The failed rank with its exit code or signal when known; otherwise a rank
  // named in "process rank N with PID P" messages (exit_code -1, signal 0).
  std::optional<MpiFailure> failure() const { return failure_ ? failure_ : rank_only_; }

 private:
  int pending_rank_ = -1;  // from "Process name:", waiting for "Exit code:"
  std::optional<MpiFailure> failure_;
  std::optional<MpiFailure> rank_only_;  // "process rank N ..." without a code
};

}  // namespace ddprun
