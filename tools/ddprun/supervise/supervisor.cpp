#include "supervise/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <set>

#include "output/line_splitter.h"
#include "output/output.h"
#include "supervise/signals.h"

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;

// How long output is still read after the last child exited (descendants may
// hold the pipes open).
constexpr auto kDrainTime = std::chrono::seconds(2);

// How often the children of an mpirun child are looked up in /proc for
// stopped ranks (they are not ddprun's children: no SIGCHLD, no waitpid).
constexpr auto kScanPeriod = std::chrono::milliseconds(500);

struct Pipe {
  int fd = -1;
  LineSplitter splitter;
};

struct Child {
  ManagedChild config;
  ChildResult result;
  Pipe pipes[2];         // [0] stdout, [1] stderr
  bool stopped = false;  // stopped by a signal (waitpid WUNTRACED), not continued since
  int stop_signal = 0;
  Clock::time_point stopped_at;
};

long long wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Run {
 public:
  Run(double grace_s, double stop_timeout_s, double monitor_interval_s, LineHandler* handler)
      : grace_(std::chrono::duration<double>(grace_s)),
        stop_timeout_s_(stop_timeout_s),
        monitor_interval_(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(monitor_interval_s))),
        handler_(handler) {}

  void set_external_stop(std::function<bool()> check) { external_stop_ = std::move(check); }
  void set_keep_going(bool alone_too, Supervisor::KeepGoing lost) {
    keep_going_alone_ = alone_too;
    keep_going_ = std::move(lost);
  }
  void set_grandchild_kill(std::function<bool()> lost, double grace_s) {
    grandchild_lost_ = std::move(lost);
    grandchild_grace_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  }

  SupervisorResult run(const std::vector<ManagedChild>& configs) {
    SignalPipe signal_pipe({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2});
    start_ = Clock::now();
    next_scan_ = start_;
    next_external_ = start_ + monitor_interval_;
    for (const ManagedChild& c : configs) has_group_less_child_ = has_group_less_child_ || !c.signal_group;
    children_.resize(configs.size());
    for (size_t i = 0; i < configs.size(); ++i) {
      children_[i].config = configs[i];
      SpawnedChild spawned = spawn_child(configs[i].spec);
      if (spawned.pid < 0) {
        result_.spawn_error = "cannot start " + configs[i].spec.label + ": " + spawned.error;
        children_.resize(i);
        begin_stop(SIGTERM);
        break;
      }
      children_[i].result.pid = spawned.pid;
      children_[i].pipes[0].fd = spawned.out_fd;
      children_[i].pipes[1].fd = spawned.err_fd;
    }
    loop(signal_pipe);
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].pipes[0].fd >= 0 || children_[i].pipes[1].fd >= 0) result_.abandoned_output.push_back(i);
      for (int s = 0; s < 2; ++s) close_pipe(i, s);
    }
    if (stopping_) final_sweep();
    for (const Child& c : children_) result_.children.push_back(c.result);
    return result_;
  }

 private:
  void loop(SignalPipe& signal_pipe) {
    std::vector<struct pollfd> fds;
    std::vector<std::pair<size_t, int>> owners;  // (child, stream) per pollfd after the first
    char buffer[64 * 1024];
    for (;;) {
      reap();
      Clock::time_point now = Clock::now();
      if (stopping_ && !killed_ && now >= kill_deadline_) escalate();
      scan_grandchildren(now);
      kill_lost_grandchildren(now);
      check_stopped(now);
      if (!stopping_ && external_stop_ && now >= next_external_ && external_stop_()) {
        result_.external_stop = true;
        begin_stop(SIGTERM);
      }
      if (now >= next_external_) next_external_ = now + monitor_interval_;
      bool all_reaped = std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.result.reaped; });
      if (all_reaped) {
        if (!draining_) {
          draining_ = true;
          drain_deadline_ = now + kDrainTime;
        }
        if (!any_pipe_open() || now >= drain_deadline_) return;
      }

      fds.clear();
      owners.clear();
      fds.push_back({signal_pipe.read_fd(), POLLIN, 0});
      for (size_t i = 0; i < children_.size(); ++i) {
        for (int s = 0; s < 2; ++s) {
          if (children_[i].pipes[s].fd < 0) continue;
          fds.push_back({children_[i].pipes[s].fd, POLLIN, 0});
          owners.emplace_back(i, s);
        }
      }
      int rc = ::poll(fds.data(), fds.size(), timeout_ms(now));
      if (rc < 0 && errno != EINTR) ::usleep(10000);  // e.g. ENOMEM: retry, never abandon the children
      if (rc <= 0) continue;

      if (fds[0].revents != 0) {
        for (int sig : signal_pipe.drain())
          if (sig != SIGCHLD) on_signal(sig);
      }
      for (size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        size_t i = owners[k - 1].first;
        int s = owners[k - 1].second;
        ssize_t n = ::read(fds[k].fd, buffer, sizeof buffer);
        if (n > 0) {
          emit(i, s, buffer, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close_pipe(i, s);
        }
      }
    }
  }

  int timeout_ms(Clock::time_point now) const {
    Clock::time_point deadline = now + monitor_interval_;  // periodic re-check
    if (stopping_ && !killed_) deadline = std::min(deadline, kill_deadline_);
    if (!stopping_ && stop_timeout_s_ > 0) {
      for (const Child& c : children_)
        if (c.stopped) deadline = std::min(deadline, c.stopped_at + stop_timeout());
      for (const auto& g : grand_stops_) deadline = std::min(deadline, g.second.since + stop_timeout());
    }
    if (has_group_less_child_) deadline = std::min(deadline, next_scan_);
    if (grandchild_kill_armed_ && !grandchildren_killed_) deadline = std::min(deadline, grandchild_kill_at_);
    if (draining_) deadline = std::min(deadline, drain_deadline_);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    return static_cast<int>(std::max<long long>(0, ms));
  }

  void emit(size_t i, int s, const char* data, size_t size) {
    Stream stream = s == 0 ? Stream::kOut : Stream::kErr;
    LineSplitter& splitter = children_[i].pipes[s].splitter;
    splitter.feed(data, size, [&](std::string_view line) { handler_->on_line(i, stream, line); });
    if (auto shown = splitter.redrawn(); !shown.empty()) handler_->on_partial(i, stream, shown);
  }

  void close_pipe(size_t i, int s) {
    Pipe& pipe = children_[i].pipes[s];
    if (pipe.fd < 0) return;
    Stream stream = s == 0 ? Stream::kOut : Stream::kErr;
    pipe.splitter.finish([&](std::string_view line) { handler_->on_line(i, stream, line); });
    ::close(pipe.fd);
    pipe.fd = -1;
  }

  // Starts `spec` in the place of child i, which has exited: its output is read to the end first.
  void replace(size_t i, const SpawnSpec& spec) {
    Child& c = children_[i];
    char buffer[64 * 1024];
    for (int s = 0; s < 2; ++s) {
      while (c.pipes[s].fd >= 0) {  // what the lost child wrote last; EOF unless a process it started holds the pipe
        struct pollfd p {
          c.pipes[s].fd, POLLIN, 0
        };
        if (::poll(&p, 1, 200) <= 0) break;
        const ssize_t n = ::read(c.pipes[s].fd, buffer, sizeof buffer);
        if (n <= 0) break;
        emit(i, s, buffer, static_cast<size_t>(n));
      }
      close_pipe(i, s);
    }
    SpawnedChild spawned = spawn_child(spec);
    if (spawned.pid < 0) {
      report("cannot start a replacement for " + spec.label + ": " + spawned.error + "; the others go on without it");
      return;
    }
    ++result_.replaced;
    c.config.spec = spec;
    c.result = ChildResult{};
    c.result.pid = spawned.pid;
    c.pipes[0].fd = spawned.out_fd;
    c.pipes[1].fd = spawned.err_fd;
    c.stopped = false;
  }

  bool any_running() const {
    return std::any_of(children_.begin(), children_.end(), [](const Child& c) { return !c.result.reaped; });
  }

  bool any_pipe_open() const {
    for (const Child& c : children_)
      if (c.pipes[0].fd >= 0 || c.pipes[1].fd >= 0) return true;
    return false;
  }

  // Collects every exited child first, so that ranks which failed at the same
  // moment are not counted as "stopped"; the lowest such index counts as first.
  void reap() {
    int failed = -1;
    for (size_t i = 0; i < children_.size(); ++i) {
      ChildResult& r = children_[i].result;
      if (r.reaped || r.pid < 0) continue;
      int status = 0;
      pid_t rc = ::waitpid(r.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (rc == 0 || (rc < 0 && errno == EINTR)) continue;
      if (rc == r.pid && (WIFSTOPPED(status) || WIFCONTINUED(status))) {
        if (WIFSTOPPED(status))
          on_stopped(i, WSTOPSIG(status));
        else
          on_continued(i);
        --i;  // this child may have more news (continued, then exited)
        continue;
      }
      r.reaped = true;
      r.status = rc == r.pid ? status : 0;
      r.exit_after_s = std::chrono::duration<double>(Clock::now() - start_).count();
      r.exit_wall_us = wall_us();
      children_[i].stopped = false;
      const bool bad = rc == r.pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (bad && !stopping_ && keep_going_ && (keep_going_alone_ || any_running())) {  // in place: others go on
        Supervisor::AfterLoss after = keep_going_(i, r.pid, status);
        if (after.go_on) {
          result_.lost.push_back(i);
          if (after.replacement) replace(i, *after.replacement);
          continue;
        }
      }
      if (bad && failed < 0) failed = static_cast<int>(i);
    }
    if (failed >= 0 && !stopping_ && result_.first_failed < 0) {
      result_.first_failed = failed;
      begin_stop(SIGTERM);
    }
  }

  Clock::duration stop_timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stop_timeout_s_));
  }

  std::string who(size_t i) const {
    return children_[i].config.spec.label + " (pid " + std::to_string(children_[i].result.pid) + ")";
  }

  void on_stopped(size_t i, int sig) {
    Child& c = children_[i];
    if (c.stopped) return;
    c.stopped = true;
    c.stop_signal = sig;
    c.stopped_at = Clock::now();
    if (stopping_) {  // being stopped by ddprun: it must be able to handle SIGTERM or die
      continue_child(c);
      return;
    }
    report_stopped(who(i), sig);
  }

  void report_stopped(const std::string& who, int sig) {
    std::string what = who + " was stopped" + (sig > 0 ? " by " + signal_name(sig) : "") + " at " + clock_time();
    if (stop_timeout_s_ > 0) {
      report(what + (keep_going_ ? "; it is killed and the others go on" : "; the job is stopped") +
             " if it is not continued within " + seconds_text(stop_timeout_s_) + " (--heartbeat-timeout)");
    } else {
      report(what + "; waiting for it (--heartbeat-timeout 0)");
    }
  }

  // The job of an mpirun child was lost (grandchild_lost_): its ranks still running get SIGKILL after the grace.
  void kill_lost_grandchildren(Clock::time_point now) {
    if (!grandchild_lost_ || grandchildren_killed_ || stopping_ || result_.received_signal != 0) return;
    if (!grandchild_kill_armed_) {
      if (!grandchild_lost_()) return;
      grandchild_kill_armed_ = true;
      grandchild_kill_at_ = now + grandchild_grace_;
    }
    if (now < grandchild_kill_at_) return;
    grandchildren_killed_ = true;
    for (const Child& c : children_) {
      if (c.config.signal_group || c.result.reaped || c.result.pid < 0) continue;
      for (pid_t rank : child_pids_of(c.result.pid)) ::kill(rank, SIGKILL);
    }
  }

  // The ranks under an mpirun child: stopped ones are found in /proc (state 'T').
  void scan_grandchildren(Clock::time_point now) {
    if (!has_group_less_child_ || now < next_scan_) return;
    next_scan_ = now + kScanPeriod;
    std::set<pid_t> stopped_now, alive;
    for (const Child& c : children_) {
      if (c.config.signal_group || c.result.reaped || c.result.pid < 0) continue;
      for (const auto& child : child_states_of(c.result.pid)) {
        alive.insert(child.first);
        if (child.second != 'T') continue;
        stopped_now.insert(child.first);
        if (grand_stops_.count(child.first) != 0) continue;
        const int rank = mpi_rank_of(child.first);
        GrandchildStop stop;
        stop.since = now;
        stop.who = (rank >= 0 ? "rank " + std::to_string(rank) : "a child of " + c.config.spec.label) + " (pid " +
                   std::to_string(child.first) + ")";
        grand_stops_[child.first] = stop;
        if (stopping_) {
          ::kill(child.first, SIGCONT);
        } else {
          report_stopped(stop.who, 0);
        }
      }
    }
    for (auto it = grand_stops_.begin(); it != grand_stops_.end();) {
      if (stopped_now.count(it->first) != 0) {
        ++it;
        continue;
      }
      if (!stopping_ && alive.count(it->first) != 0)
        report(it->second.who + " was continued after " +
               seconds_text(std::chrono::duration<double>(now - it->second.since).count()) + " stopped");
      it = grand_stops_.erase(it);
    }
  }

  void on_continued(size_t i) {
    Child& c = children_[i];
    if (!c.stopped) return;
    c.stopped = false;
    if (stopping_) return;
    report(who(i) + " was continued after " +
           seconds_text(std::chrono::duration<double>(Clock::now() - c.stopped_at).count()) + " stopped");
  }

  // A child stopped for longer than the stop timeout fails the job.
  void check_stopped(Clock::time_point now) {
    if (stopping_ || stop_timeout_s_ <= 0) return;
    for (size_t i = 0; i < children_.size(); ++i) {
      const Child& c = children_[i];
      if (!c.stopped || c.result.reaped || now < c.stopped_at + stop_timeout()) continue;
      if (keep_going_) {  // in-place recovery: it is lost, the others go on (reap() reports it)
        report(who(i) + " is still stopped after " +
               seconds_text(std::chrono::duration<double>(now - c.stopped_at).count()) + ": killing it (SIGKILL)");
        kill_stalled(c.result.pid, c.config.signal_group);
        children_[i].stopped = false;
        continue;
      }
      result_.stalled = static_cast<int>(i);
      result_.stalled_who = who(i);
      result_.stalled_signal = c.stop_signal;
      result_.stalled_for_s = std::chrono::duration<double>(now - c.stopped_at).count();
      report(who(i) + " is still stopped after " + seconds_text(result_.stalled_for_s) +
             ": killing it (SIGKILL) and stopping the job");
      begin_stop(SIGTERM);  // SIGKILL for the stopped one (send_all)
      return;
    }
    for (const auto& g : grand_stops_) {
      if (now < g.second.since + stop_timeout()) continue;
      result_.stalled = 0;
      for (size_t i = 0; i < children_.size(); ++i)
        if (!children_[i].config.signal_group) result_.stalled = static_cast<int>(i);
      result_.stalled_who = g.second.who;
      result_.stalled_for_s = std::chrono::duration<double>(now - g.second.since).count();
      report(g.second.who + " is still stopped after " + seconds_text(result_.stalled_for_s) +
             ": killing it (SIGKILL) and stopping the job");
      begin_stop(SIGTERM);  // SIGKILL for the stopped one (send_all)
      return;
    }
  }

  // A rank stopped when the job fails (past the timeout, or meanwhile) gets SIGKILL, not SIGTERM: its peers have
  // given up on it, so a graceful end (ddp-train's: finish the step with them, checkpoint) could only wait out the
  // kill grace.
  static void kill_stalled(pid_t pid, bool group) {
    if (group) ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  }

  // SIGCONT so that a stopped child acts on the signal it was sent.
  void continue_child(const Child& c) {
    if (c.result.pid < 0 || c.result.reaped) return;
    if (c.config.signal_group) ::kill(-c.result.pid, SIGCONT);
    ::kill(c.result.pid, SIGCONT);
  }

  void on_signal(int sig) {
    if (sig == SIGUSR1 || sig == SIGUSR2) {  // Slurm's warning before a time limit: passed on; the ranks decide
      if (result_.received_signal == 0) result_.received_signal = sig;
      send_all(sig, /*mark=*/false);
      return;
    }
    const int before = result_.received_signal;
    if (before == 0 || before == SIGUSR1 || before == SIGUSR2) {  // the first stop signal (a warning came before)
      result_.received_signal = sig;
      if (!stopping_) {
        begin_stop(sig);
      } else {
        send_all(sig, /*mark=*/false);  // already stopping after a failure: forward too
      }
    } else if (!killed_) {
      result_.kill_signal = sig;
      escalate();  // a second signal: do not wait for the grace period
    }
  }

  void send_all(int sig, bool mark) {
    for (Child& c : children_) {
      ChildResult& r = c.result;
      if (r.pid < 0) continue;
      if (!r.reaped) {
        if (mark) r.sent_stop = true;
        if (c.config.signal_group) ::kill(-r.pid, sig);
        if (c.config.signal_group || !signal_grandchildren(r.pid, sig)) ::kill(r.pid, sig);
        // A stopped rank: continued to act on a signal ddprun received (the operator's stop); killed when the job
        // fails, as the stalled one is (continued, it would only report losing the peers that ended meanwhile).
        const bool failing = result_.received_signal == 0;
        if (c.stopped) failing ? kill_stalled(r.pid, c.config.signal_group) : continue_child(c);
        if (!c.config.signal_group)
          for (const auto& g : grand_stops_) ::kill(g.first, failing ? SIGKILL : SIGCONT);
      } else if (c.config.signal_group) {
        ::kill(-r.pid, sig);  // leftover descendants of an exited rank
      }
    }
  }

  // mpirun's ranks get a stop signal from ddprun directly: mpirun's own forwarding SIGKILLs them right after (2 s with
  // its default kill pause), before a preempted rank can finish its step and checkpoint. mpirun ends its job once
  // they have ended. False: no rank yet.
  bool signal_grandchildren(pid_t pid, int sig) {
    const std::vector<pid_t> ranks = child_pids_of(pid);
    for (pid_t rank : ranks) ::kill(rank, sig);
    return !ranks.empty();
  }

  void begin_stop(int sig) {
    if (stopping_) return;
    stopping_ = true;
    result_.stop_signal = sig;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace_);
    send_all(sig, /*mark=*/true);
  }

  void escalate() {
    stopping_ = true;
    killed_ = true;
    for (Child& c : children_) {
      ChildResult& r = c.result;
      if (r.pid < 0) continue;
      if (!r.reaped) {
        r.sent_kill = true;
        if (!c.config.signal_group) {
          for (pid_t grandchild : child_pids_of(r.pid)) {
            ::kill(-grandchild, SIGKILL);
            ::kill(grandchild, SIGKILL);
          }
        }
        ::kill(r.pid, SIGKILL);
      }
      ::kill(-r.pid, SIGKILL);
    }
  }

  // After a failure or a signal: nothing of the ranks' process groups may
  // outlive ddprun.
  void final_sweep() {
    for (const Child& c : children_)
      if (c.result.pid > 0 && c.config.signal_group) ::kill(-c.result.pid, SIGKILL);
  }

  std::chrono::duration<double> grace_;
  double stop_timeout_s_;
  Clock::duration monitor_interval_;
  LineHandler* handler_;
  Clock::time_point start_;
  std::function<bool()> external_stop_;
  Supervisor::KeepGoing keep_going_;
  bool keep_going_alone_ = false;
  Clock::time_point next_external_;
  std::function<bool()> grandchild_lost_;  // set_grandchild_kill
  Clock::duration grandchild_grace_{};
  bool grandchild_kill_armed_ = false;
  bool grandchildren_killed_ = false;
  Clock::time_point grandchild_kill_at_;
  // Stopped children of group-less (mpirun) children, by pid.
  struct GrandchildStop {
    Clock::time_point since;
    std::string who;
  };
  std::map<pid_t, GrandchildStop> grand_stops_;
  bool has_group_less_child_ = false;
  Clock::time_point next_scan_;
  std::vector<Child> children_;
  SupervisorResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  bool draining_ = false;
  Clock::time_point kill_deadline_;
  Clock::time_point drain_deadline_;
};

}  // namespace

SupervisorResult Supervisor::run(const std::vector<ManagedChild>& children) {
  Run run(grace_s_, stop_timeout_s_, monitor_interval_s_, handler_);
  run.set_external_stop(external_stop_);
  run.set_grandchild_kill(grandchild_lost_, grandchild_grace_s_);
  run.set_keep_going(keep_going_alone_, keep_going_);
  return run.run(children);
}

}  // namespace ddprun
