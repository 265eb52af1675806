// Runs a set of child processes to completion: multiplexes their output,
// stops all of them when one fails or when ddprun gets SIGINT/SIGTERM/SIGHUP/SIGQUIT,
// and escalates to SIGKILL after a grace period.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervise/child_process.h"

namespace ddprun {

enum class Stream { kOut, kErr };

// Receives every output line of every child (without the '\n').
class LineHandler {
 public:
  virtual ~LineHandler() = default;
  virtual void on_line(size_t child, Stream stream, std::string_view line) = 0;
  // A line not finished yet but redrawn with '\r' (a progress bar): `shown` is its text after the last '\r'.
  virtual void on_partial(size_t /*child*/, Stream /*stream*/, std::string_view /*shown*/) {}
};

struct ManagedChild {
  SpawnSpec spec;
  // true: stop signals go to the child's whole process group (ranks).
  // false (mpirun): SIGTERM/SIGINT go to the child's children (its ranks), or
  // to the child while it has none; SIGKILL goes to its group and to the
  // groups of its direct children.
  bool signal_group = true;
};

struct ChildResult {
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;              // waitpid() status once reaped
  bool sent_stop = false;      // was still running when ddprun sent it the stop signal
  bool sent_kill = false;      // was still running after the grace period: SIGKILLed
  double exit_after_s = -1;    // seconds from the start of run() to its reaping
  long long exit_wall_us = 0;  // wall clock (microseconds since the epoch) of its reaping
};

struct SupervisorResult {
  std::vector<ChildResult> children;
  int first_failed = -1;    // index of the first child that failed on its own
  int received_signal = 0;  // first SIGINT/SIGTERM/SIGHUP/SIGQUIT ddprun received
  int stop_signal = 0;      // signal sent to stop the others (0: none sent)
  int kill_signal = 0;      // a second signal that sent SIGKILL before the grace period ended
  std::string spawn_error;  // set when a child could not be started
  // Children whose stdout/stderr were still open ~2 s after every child had
  // exited (a process they started holds them); ddprun stopped reading them.
  std::vector<size_t> abandoned_output;
  // A child that stayed stopped (SIGSTOP, SIGTSTP...) longer than the stop
  // timeout: ddprun stopped the job because of it.
  int stalled = -1;          // index of the child (the mpirun child for one of its ranks)
  std::string stalled_who;   // "rank 1 (pid 42)"
  int stalled_signal = 0;    // the signal that stopped it (0: unknown, seen in /proc)
  double stalled_for_s = 0;  // how long it had been stopped
  std::vector<size_t> lost;  // set_keep_going: the children that failed while others went on, in order
  int replaced = 0;          // how many of them a replacement was started for
  // The external stop check (set_external_stop) asked to stop the children.
  bool external_stop = false;
};

class Supervisor {
 public:
  Supervisor(double kill_grace_s, LineHandler* handler) : grace_s_(kill_grace_s), handler_(handler) {}

  // A child stopped by a signal is reported at once (on stderr, by its label);
  // if it is still stopped after `seconds` (> 0), the job is stopped as after
  // a failure and SupervisorResult::stalled names it. 0: only report. The
  // children of a child without signal_group (mpirun's ranks) are checked in
  // /proc every 0.5 s, and named by OMPI_COMM_WORLD_RANK.
  void set_stop_timeout(double seconds) { stop_timeout_s_ = seconds; }

  // Longest time between two checks of the children when nothing happens
  // (--monitor-interval); exits and output are seen at once. Default 1 s.
  void set_monitor_interval(double seconds) { monitor_interval_s_ = seconds; }

  // Called at each periodic check (--monitor-interval): true stops every child
  // as after a failure (SIGTERM, then SIGKILL), without naming a failed child.
  // The multi-node agent uses it when another node failed.
  void set_external_stop(std::function<bool()> check) { external_stop_ = std::move(check); }

  // For children without signal_group (mpirun): checked as the external stop is, and after each output line.
  // Once it returns true while ddprun is not stopping the job itself, the children of those children (mpirun's
  // local ranks) are SIGKILLed after `grace_s`, once. mpirun uses it when it aborted its job because a rank
  // failed: the survivors are blocked in MPI and cannot end by themselves (mpirun's own kill waits ~2 s).
  void set_grandchild_kill(std::function<bool()> lost, double grace_s) {
    grandchild_lost_ = std::move(lost);
    grandchild_grace_s_ = grace_s;
  }

  // In-place recovery (--recovery inplace): a child that fails on its own, or stays stopped past the stop timeout
  // (it is SIGKILLed then), is passed to `lost` while another child still runs, and the others are left running;
  // SupervisorResult::lost lists them. When `lost` returns a spec, that process is started in the child's place
  // (its output read under the same index, after the lost one's). A failure with no other child running, or one
  // that `lost` answers with go_on false (too few left), fails the job as usual.
  struct AfterLoss {
    bool go_on = true;
    std::optional<SpawnSpec> replacement;
  };
  using KeepGoing = std::function<AfterLoss(size_t child, pid_t pid, int status)>;
  // alone_too: `lost` is asked also when no other child runs (the job's other ranks are on other nodes).
  void set_keep_going(bool alone_too, KeepGoing lost) {
    keep_going_alone_ = alone_too;
    keep_going_ = std::move(lost);
  }

  // Blocks until every child has exited and its output has been drained
  // (at most ~2 s after the last exit, in case descendants keep a pipe open).
  SupervisorResult run(const std::vector<ManagedChild>& children);

 private:
  double grace_s_;
  double stop_timeout_s_ = 0;
  double monitor_interval_s_ = 1.0;
  std::function<bool()> external_stop_;
  std::function<bool()> grandchild_lost_;
  double grandchild_grace_s_ = 0;
  KeepGoing keep_going_;
  bool keep_going_alone_ = false;
  LineHandler* handler_;
};

}  // namespace ddprun
