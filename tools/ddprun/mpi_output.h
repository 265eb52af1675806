// Understanding mpirun's output: --tag-output prefixes and failure messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

struct TaggedLine {
  int rank = -1;
  bool is_stderr = false;  // <stderr> or <stddiag>
  std::string text;  // without any of mpirun's tags
};

// Parses "[jobid,rank]<stdout>:text" / "<stderr>" / "<stddiag>"; nullopt for
// lines without such a tag (mpirun's own messages). Tags of the same job within
// the text (a line the rank wrote in pieces) are removed too.
std::optional<TaggedLine> parse_tagged_line(std::string_view line);

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
