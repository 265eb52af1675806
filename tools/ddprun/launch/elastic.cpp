#include "launch/elastic.h"

#include <poll.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "launch/net_check.h"
#include "output/output.h"
#include "supervise/signals.h"

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;

// Between attempts: long enough for the old ranks' sockets to close.
constexpr double kRestartPause_s = 0.5;
// How long a fixed --master-port may stay busy after an attempt.
constexpr double kPortWait_s = 30;

// Waits `seconds`, or less when ddprun gets a stop signal; returns it (0: none).
int pause_unless_signal(double seconds) {
  SignalPipe signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT});
  struct pollfd fd = {signals.read_fd(), POLLIN, 0};
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return 0;
    if (::poll(&fd, 1, static_cast<int>(left)) > 0)
      for (int sig : signals.drain()) return sig;
  }
}

// The port for a restart: a new free one with --standalone; else the same
// --master-port once rank 0 of this node could bind it again (its TCPStore).
// -1 after reporting an error; -2 - signal when ddprun got a stop signal.
int restart_port(const Options& options, const Placement& place) {
  const int previous = place.master_port;
  if (options.standalone) {
    std::string error;
    int port = pick_free_port(&error);
    if (port < 0) report("--standalone: cannot find a free port on 127.0.0.1 for the restart: " + error);
    return port;
  }
  if (place.node_rank != 0) return previous;
  const auto end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kPortWait_s));
  bool told = false;
  for (;;) {
    PortCheck check = check_port(place.master_addr, previous);
    if (check.result != PortCheck::kInUse) return previous;
    if (Clock::now() >= end) {
      report("cannot restart: MASTER_ADDR:MASTER_PORT " + place.master_addr + ":" + std::to_string(previous) +
             " is still in use " + seconds_text(kPortWait_s) +
             " after the previous attempt (another program or a leftover of the ranks holds it); "
             "use --standalone or a --master-port nobody else uses");
      return -1;
    }
    if (!told) {
      report("waiting for port " + std::to_string(previous) + " to be free again before the restart");
      told = true;
    }
    if (int sig = pause_unless_signal(0.1)) return -2 - sig;
  }
}

}  // namespace

std::string restart_line(const Options& options, const Attempt& attempt, bool stopped_by_signal) {
  if (stopped_by_signal || attempt.restart_count >= options.max_restarts) return "";
  return "restarting every rank (restart " + std::to_string(attempt.restart_count + 1) + " of " +
         std::to_string(options.max_restarts) + ", --max-restarts " + std::to_string(options.max_restarts) + ")";
}

std::string restarts_note(const Options& options, const Attempt& attempt, int received_signal) {
  if (options.max_restarts == 0) return "";
  if (received_signal > 0)
    return "not restarting: ddprun received " + signal_name(received_signal) + " (the job is being stopped; " +
           std::to_string(attempt.restart_count) + " of " + std::to_string(options.max_restarts) + " restarts used)";
  if (attempt.restart_count < options.max_restarts) return "";
  return "failed after " + std::to_string(attempt.restart_count) + " restart" +
         (attempt.restart_count == 1 ? "" : "s") + " (--max-restarts " + std::to_string(options.max_restarts) +
         "): restarts exhausted";
}

int signalled_exit_code(int signal, bool preempted, std::vector<std::string>* notes) {
  if (!preempted) return 128 + signal;
  notes->push_back("the ranks were preempted: they wrote a checkpoint and exited with " +
                   std::to_string(kExitPreempted) + "; exiting with " + std::to_string(kExitPreempted) +
                   " so that the job can be requeued (the same command with --resume goes on from it)");
  return kExitPreempted;
}

int run_attempts(const Options& options, Attempt first, const std::function<AttemptOutcome(const Attempt&)>& launch) {
  Attempt attempt = std::move(first);
  for (;;) {
    AttemptOutcome outcome = launch(attempt);
    const int restarts = attempt.restart_count;
    attempt.restart_count += outcome.replacements;  // --recovery inplace: each replaced rank was a restart
    if (outcome.exit_code == 0) {
      if (restarts > 0)
        report("attempt " + std::to_string(restarts) + " succeeded after " + std::to_string(restarts) + " restart" +
               (restarts == 1 ? "" : "s"));
      return 0;
    }
    if (outcome.stopped_by_signal || attempt.restart_count >= options.max_restarts) return outcome.exit_code;
    if (int sig = pause_unless_signal(kRestartPause_s)) {
      report("received " + signal_name(sig) + " before the restart: not restarting");
      return 128 + sig;
    }
    int port = restart_port(options, attempt.place);
    if (port <= -2) {
      report("received " + signal_name(-2 - port) + " before the restart: not restarting");
      return 128 + (-2 - port);
    }
    if (port < 0) return 1;
    attempt.place.master_port = port;
    ++attempt.restart_count;
  }
}

}  // namespace ddprun
