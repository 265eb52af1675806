// The failure summary ddprun prints on stderr.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

struct RankFailure {
  int rank = -1;                         // global rank
  int local_rank = -1;                   // -1: unknown
  long pid = -1;                         // -1: unknown
  int exit_code = -1;                    // set when the rank exited with a code
  int signal = 0;                        // set when the rank was killed by a signal
  std::vector<std::string> stderr_tail;  // its last stderr lines
};

struct Summary {
  std::vector<std::string> root_cause;  // printed first (see root_cause.h)
  bool has_failure = false;
  RankFailure failure;             // the first failed rank (when has_failure)
  std::string failure_unknown;     // when a failure happened but no rank is known
  int received_signal = 0;         // signal ddprun itself got and forwarded
  int stop_signal = 0;             // signal sent to stop the other ranks
  std::vector<int> stopped_ranks;  // ranks that were still running when stopped
  std::vector<int> killed_ranks;   // ranks SIGKILLed after the grace period
  double grace_s = 0;
  int kill_signal = 0;             // SIGKILL came early, after a second signal to ddprun
  std::vector<std::string> notes;  // extra lines printed before the exit code
  int exit_code = 0;
  // Printed last instead of "exiting with code N" when set (another attempt follows).
  std::string final_line;
};

// Lines of the summary (without "ddprun: " prefixes or newlines).
std::vector<std::string> format_summary(const Summary& summary);

// Prints format_summary() to stderr, each line prefixed with "ddprun: ".
void print_summary(const Summary& summary);

// "0, 2, 3"
std::string join_ranks(const std::vector<int>& ranks);

}  // namespace ddprun
