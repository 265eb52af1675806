// The root cause of a failed job, for the top of the failure summary: the
// rank that failed first in time, which is not always the first to exit
// (a rank that records "Permission denied" and then cleans up exits after the
// ranks that lost their connection to it).
#pragma once

#include <string>
#include <vector>

#include "supervise/error_files.h"

namespace ddprun {

struct RankOutcome {
  int rank = -1;
  long pid = -1;
  bool exited = false;         // reaped by ddprun
  int status = 0;              // waitpid() status when exited
  double exit_after_s = -1;    // seconds from launch to exit
  long long exit_wall_us = 0;  // wall clock of the exit
};

struct RootCauseInput {
  std::vector<RankOutcome> ranks;
  std::vector<ErrorRecord> errors;  // from the ranks' error files
  // Wall clock of the first failure ddprun saw (the first failed rank's
  // exit); 0 when none: then no rank's exit with code 0 counts as early.
  long long failure_wall_us = 0;
  // A rank stopped by a signal for too long: "rank 1 (pid 42)" (empty: none).
  std::string stalled_who;
  int stalled_signal = 0;  // 0: unknown
  double stalled_for_s = 0;
};

// Summary lines, without "ddprun: " (empty when nothing is known):
//   root cause: rank 1 (pid 42) was stopped (SIGSTOP) for 30 s and did not answer
//   root cause: rank 0 (pid 41) reported the first error, at 07:55:01.123:
//     | cannot open /data: Permission denied
//   likely root cause: rank 1 (pid 42) exited with code 0 after 3.2 s while rank(s) 0, 2 still ran
std::vector<std::string> root_cause_lines(const RootCauseInput& input);

// "07:55:01.123" (local time) of a wall clock in microseconds.
std::string wall_time_text(long long wall_us);

}  // namespace ddprun
