#include "supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "line_splitter.h"
#include "signals.h"

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;

// How long output is still read after the last child exited (descendants may
// hold the pipes open).
constexpr auto kDrainTime = std::chrono::seconds(2);

struct Pipe {
  int fd = -1;
  LineSplitter splitter;
};

struct Child {
  ManagedChild config;
  ChildResult result;
  Pipe pipes[2];  // [0] stdout, [1] stderr
};

class Run {
 public:
  Run(double grace_s, LineHandler* handler) : grace_(std::chrono::duration<double>(grace_s)), handler_(handler) {}

  SupervisorResult run(const std::vector<ManagedChild>& configs) {
    SignalPipe signal_pipe({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD});
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
      bool all_reaped = std::all_of(children_.begin(), children_.end(),
                                    [](const Child& c) { return c.result.reaped; });
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
    Clock::time_point deadline = now + std::chrono::seconds(1);  // periodic re-check
    if (stopping_ && !killed_) deadline = std::min(deadline, kill_deadline_);
    if (draining_) deadline = std::min(deadline, drain_deadline_);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    return static_cast<int>(std::max<long long>(0, ms));
  }

  void emit(size_t i, int s, const char* data, size_t size) {
    Stream stream = s == 0 ? Stream::kOut : Stream::kErr;
    children_[i].pipes[s].splitter.feed(data, size,
                                        [&](std::string_view line) { handler_->on_line(i, stream, line); });
  }

  void close_pipe(size_t i, int s) {
    Pipe& pipe = children_[i].pipes[s];
    if (pipe.fd < 0) return;
    Stream stream = s == 0 ? Stream::kOut : Stream::kErr;
    pipe.splitter.finish([&](std::string_view line) { handler_->on_line(i, stream, line); });
    ::close(pipe.fd);
    pipe.fd = -1;
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
      pid_t rc = ::waitpid(r.pid, &status, WNOHANG);
      if (rc == 0 || (rc < 0 && errno == EINTR)) continue;
      r.reaped = true;
      r.status = rc == r.pid ? status : 0;
      if (rc == r.pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed < 0)
        failed = static_cast<int>(i);
    }
    if (failed >= 0 && !stopping_ && result_.first_failed < 0) {
      result_.first_failed = failed;
      begin_stop(SIGTERM);
    }
  }

  void on_signal(int sig) {
    if (result_.received_signal == 0) {
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
        ::kill(r.pid, sig);
      } else if (c.config.signal_group) {
        ::kill(-r.pid, sig);  // leftover descendants of an exited rank
      }
    }
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
  LineHandler* handler_;
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
  Run run(grace_s_, handler_);
  return run.run(children);
}

}  // namespace ddprun
