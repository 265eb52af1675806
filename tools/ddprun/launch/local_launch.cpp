#include "launch/local_launch.h"

#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "ddp/dist/launch_env.h"
#include "launch/rank_env.h"
#include "output/line_splitter.h"
#include "output/output.h"
#include "output/rank_logs.h"
#include "output/summary.h"
#include "supervise/error_files.h"
#include "supervise/root_cause.h"
#include "supervise/signals.h"
#include "supervise/supervisor.h"

namespace ddprun {

namespace {

// Writes "[rank N] line" to ddprun's stdout/stderr and keeps stderr tails.
class RankLines : public LineHandler {
 public:
  RankLines(const std::vector<int>& ranks, RankLogs* logs, bool prefix)
      : ranks_(ranks), tails_(ranks.size()), logs_(logs) {
    for (int rank : ranks) prefixes_.push_back(prefix ? rank_prefix(rank) : std::string());
  }

  void on_line(size_t child, Stream stream, std::string_view line) override {
    line = shown_text(line);  // a bar redrawn with '\r': its final state only, in files and on the console
    logs_->write(ranks_[child], stream, line);
    if (stream == Stream::kErr) tails_[child].add(line);
    if (!logs_->to_console(stream)) return;
    const int fd = stream == Stream::kErr ? STDERR_FILENO : STDOUT_FILENO;
    const bool was_live = !live_.empty();
    if (was_live) write_all(STDOUT_FILENO, "\r\x1b[K");  // the live line gives way to a finished one
    write_line(fd, prefixes_[child], line);
    if (!was_live) return;
    if (child == live_child_ && stream == Stream::kOut)
      live_.clear();  // the bar's line ended
    else
      write_all(STDOUT_FILENO, live_);  // redrawn below the new line
  }

  // On a terminal, a rank's '\r' updates are redrawn in place after its prefix (DDP_TTY=1 asks ranks for them).
  void on_partial(size_t child, Stream stream, std::string_view shown) override {
    if (stream != Stream::kOut || !live_console_ || !logs_->to_console(stream)) return;
    live_ = "\r" + prefixes_[child] + std::string(shown);
    live_child_ = child;
    write_all(STDOUT_FILENO, live_);
  }

  const TailBuffer& tail(size_t child) const { return tails_[child]; }

 private:
  std::vector<int> ranks_;
  std::vector<std::string> prefixes_;
  std::vector<TailBuffer> tails_;
  RankLogs* logs_;
  const bool live_console_ = ::isatty(STDOUT_FILENO) != 0;
  std::string live_;  // the redrawn line on the console now, "" when none
  size_t live_child_ = 0;
};

// DDP_TTY=1 and COLUMNS (the terminal's width less the prefix) when ddprun's stdout is a terminal: the ranks'
// stdout is a pipe, so they cannot tell; with the hint their progress lines are redrawn in place (on_partial).
std::vector<std::pair<std::string, std::string>> tty_hint(size_t prefix_width) {
  if (!::isatty(STDOUT_FILENO)) return {};
  std::vector<std::pair<std::string, std::string>> vars = {{ddp::launch_env::kTty.name, "1"}};
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > prefix_width + 20)
    vars.emplace_back(ddp::launch_env::kColumns.name, std::to_string(ws.ws_col - prefix_width));
  return vars;
}

}  // namespace

AttemptOutcome run_local(const Options& options, const std::string& exec_path, const Attempt& attempt) {
  return run_local(options, exec_path, attempt, LocalLaunchExtras{});
}

AttemptOutcome run_local(const Options& options, const std::string& exec_path, const Attempt& attempt,
                         const LocalLaunchExtras& extras) {
  if (extras.failed_rank != nullptr) *extras.failed_rank = -1;
  const int nproc = options.nproc_per_node;
  const std::vector<std::string> base = current_environment();
  const int cpus = online_cpu_count();

  RankLogs logs(options, attempt.restart_count);
  if (!logs.error().empty()) report("warning: " + logs.error() + "; the ranks' lines go to the console only");
  // The error files: in the attempt's log directory (kept), else a temporary one.
  const auto error_dir = error_dir_for(logs.attempt_dir());
  if (!error_dir->error().empty())
    report("warning: " + error_dir->error() + "; the summary cannot name the first error");
  const auto elastic = elastic_env_vars(options, attempt);

  std::vector<int> ranks;
  std::vector<ManagedChild> children;
  for (int local = 0; local < nproc; ++local) {
    int rank = attempt.place.first_rank + local;
    ranks.push_back(rank);
    ManagedChild child;
    child.spec.exec_path = exec_path;
    if (!extras.argv.empty()) {
      child.spec.argv = extras.argv;
    } else {
      child.spec.argv.push_back(options.program);
      child.spec.argv.insert(child.spec.argv.end(), options.program_args.begin(), options.program_args.end());
    }
    auto vars = rank_env_vars(options, attempt, base, cpus, local);
    vars.insert(vars.end(), elastic.begin(), elastic.end());
    vars.emplace_back(ddp::launch_env::kRoleRank.name, std::to_string(rank));
    vars.emplace_back(ddp::launch_env::kErrorFile.name, error_dir->file_for_rank(rank));
    for (const auto& kv : tty_hint(extras.prefix_output ? rank_prefix(rank).size() : 0)) vars.push_back(kv);
    for (const auto& kv : extras.env) {
      vars.erase(std::remove_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == kv.first; }),
                 vars.end());
      vars.push_back(kv);
    }
    logs.open_rank(rank);
    child.spec.env = merge_env(base, vars);
    child.spec.label = "rank " + std::to_string(rank);
    children.push_back(std::move(child));
  }

  RankLines lines(ranks, &logs, extras.prefix_output);
  Supervisor supervisor(options.kill_grace_s, &lines);
  supervisor.set_stop_timeout(options.heartbeat_timeout_s);
  supervisor.set_monitor_interval(options.monitor_interval_s);
  std::string stop_reason;
  if (attempt.external_stop)
    supervisor.set_external_stop([&] {
      stop_reason = attempt.external_stop();
      return !stop_reason.empty();
    });
  int replaced = 0;
  int running = nproc;  // ranks running, a replacement from its start
  if (extras.on_lost)
    supervisor.set_keep_going(extras.alone_too, [&](size_t i, pid_t pid, int status) -> Supervisor::AfterLoss {
      const std::string how =
          WIFSIGNALED(status) ? signal_name(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status));
      extras.on_lost(ranks[i], pid, how);  // the others rebuild without it (and, on a stop, save first)
      const bool replace = replaced < extras.replacements;
      if (--running == 0 && !replace) return {false, std::nullopt};  // this node's last rank: it fails as usual
      // Below the fewest ranks the job trains with: no replacement either (one node: its ranks are the job's).
      if (!extras.alone_too && running < extras.min_ranks) {
        report("rank " + std::to_string(ranks[i]) + " was lost (" + how + ") and " + std::to_string(running) +
               " rank(s) are left, fewer than --min-ranks " + std::to_string(extras.min_ranks) +
               ": stopping the others (--recovery inplace falls back to the restart path)");
        return {false, std::nullopt};
      }
      const int restart = attempt.restart_count + replaced + 1;
      report("rank " + std::to_string(ranks[i]) + " was lost (" + how + "); the others go on" +
             (replace ? ", and a replacement joins them (restart " + std::to_string(restart) + " of " +
                            std::to_string(options.max_restarts) + ", --max-restarts)"
                      : "") +
             " (--recovery inplace)");
      if (!replace) return {true, std::nullopt};
      ++replaced;
      ++running;  // the replacement, from its start
      SpawnSpec spec = children[i].spec;
      spec.env = merge_env(spec.env, extras.replacement_env);
      return {true, spec};
    });
  SupervisorResult result = supervisor.run(children);

  if (!result.spawn_error.empty()) report(result.spawn_error);
  if (!result.abandoned_output.empty()) {
    std::vector<int> abandoned;
    for (size_t i : result.abandoned_output) abandoned.push_back(ranks[i]);
    report("warning: output of rank(s) " + join_ranks(abandoned) +
           " was still open 2 s after the rank exited (held by a process it started); stopped reading it");
  }
  if (result.first_failed < 0 && result.received_signal == 0 && result.spawn_error.empty() && result.stalled < 0) {
    if (!result.lost.empty() && !result.external_stop) {
      std::vector<int> lost;
      for (size_t i : result.lost) lost.push_back(ranks[i]);
      std::sort(lost.begin(), lost.end());
      report("lost rank(s) " + join_ranks(lost) + " on the way" +
             (replaced > 0 ? " (" + std::to_string(replaced) + " replaced)" : std::string()) +
             "; the other ranks ended normally (--recovery inplace)");
    }
    if (!result.external_stop) {
      AttemptOutcome done;
      done.replacements = replaced;
      return done;
    }
    report("stopped the ranks of this node (" + join_ranks(ranks) + "): " + stop_reason);
    AttemptOutcome stopped;
    stopped.exit_code = 1;
    stopped.stopped_externally = true;
    return stopped;
  }

  Summary summary;
  summary.grace_s = options.kill_grace_s;
  summary.received_signal = result.received_signal;
  summary.stop_signal = result.stop_signal;
  summary.kill_signal = result.kill_signal;
  if (result.received_signal == 0) {  // else the ranks failed because ddprun stopped them
    RootCauseInput cause;
    for (size_t i = 0; i < result.children.size(); ++i) {
      const ChildResult& c = result.children[i];
      cause.ranks.push_back({ranks[i], static_cast<long>(c.pid), c.reaped, c.status, c.exit_after_s, c.exit_wall_us});
    }
    cause.errors = error_dir->read_all();
    if (result.first_failed >= 0)
      cause.failure_wall_us = result.children[static_cast<size_t>(result.first_failed)].exit_wall_us;
    cause.stalled_who = result.stalled_who;
    cause.stalled_signal = result.stalled_signal;
    cause.stalled_for_s = result.stalled_for_s;
    summary.root_cause = root_cause_lines(cause);
  }
  if (result.first_failed >= 0) {
    size_t i = static_cast<size_t>(result.first_failed);
    const ChildResult& failed = result.children[i];
    summary.has_failure = true;
    summary.failure.rank = ranks[i];
    summary.failure.local_rank = static_cast<int>(i);
    summary.failure.pid = failed.pid;
    if (WIFSIGNALED(failed.status)) {
      summary.failure.signal = WTERMSIG(failed.status);
    } else {
      summary.failure.exit_code = WEXITSTATUS(failed.status);
    }
    summary.failure.stderr_tail = lines.tail(i).lines();
  }
  for (size_t i = 0; i < result.children.size(); ++i) {
    if (result.children[i].sent_stop) summary.stopped_ranks.push_back(ranks[i]);
    if (result.children[i].sent_kill) summary.killed_ranks.push_back(ranks[i]);
  }
  // How the other ranks ended, grouped: "rank(s) 0, 2 ended with signal 15 (SIGTERM)".
  std::vector<std::pair<std::string, std::vector<int>>> endings;
  for (size_t i = 0; i < result.children.size(); ++i) {
    const ChildResult& c = result.children[i];
    if (static_cast<int>(i) == result.first_failed || !c.reaped || (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0))
      continue;
    const std::string how = describe_wait_status(c.status);
    auto it = std::find_if(endings.begin(), endings.end(), [&](const auto& e) { return e.first == how; });
    if (it == endings.end()) it = endings.insert(endings.end(), {how, {}});
    it->second.push_back(ranks[i]);
  }
  for (const auto& e : endings) summary.notes.push_back("rank(s) " + join_ranks(e.second) + " ended with " + e.first);

  if (result.received_signal > 0) {
    const bool preempted = std::any_of(result.children.begin(), result.children.end(), [](const ChildResult& c) {
      return c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == kExitPreempted;
    });
    summary.exit_code = signalled_exit_code(result.received_signal, preempted, &summary.notes);
  } else if (result.first_failed >= 0) {
    summary.exit_code = exit_code_of_wait_status(result.children[static_cast<size_t>(result.first_failed)].status);
  } else {
    summary.exit_code = 1;  // a rank stopped for too long, or a spawn failure
  }
  Attempt counted = attempt;  // the restarts used include this attempt's replacements
  counted.restart_count += replaced;
  const std::string note = restarts_note(options, counted, result.received_signal);
  if (!note.empty()) summary.notes.push_back(note);
  summary.final_line = restart_line(options, counted, result.received_signal > 0);
  if (summary.final_line.empty() && !extras.final_line.empty())
    summary.final_line = extras.final_line + std::to_string(summary.exit_code);
  if (extras.failed_rank != nullptr && result.first_failed >= 0)
    *extras.failed_rank = ranks[static_cast<size_t>(result.first_failed)];
  const std::vector<std::string> summary_lines = format_summary(summary);
  for (const std::string& line : summary_lines) write_line(STDERR_FILENO, extras.summary_prefix, line);
  if (extras.summary != nullptr) *extras.summary = summary_lines;
  AttemptOutcome outcome;
  outcome.replacements = replaced;
  outcome.exit_code = summary.exit_code;
  outcome.stopped_by_signal = result.received_signal > 0;
  if (result.received_signal > 0) {
    outcome.failure = "ddprun received " + signal_name(result.received_signal);
  } else if (result.first_failed >= 0) {
    outcome.failure = "rank " + std::to_string(summary.failure.rank) + " " +
                      describe_wait_status(result.children[static_cast<size_t>(result.first_failed)].status);
  } else if (result.stalled >= 0) {
    outcome.failure =
        result.stalled_who + " stopped answering (stopped for " + seconds_text(result.stalled_for_s) + ")";
  } else {
    outcome.failure = result.spawn_error.empty() ? "a launch error" : result.spawn_error;
  }
  return outcome;
}

}  // namespace ddprun
