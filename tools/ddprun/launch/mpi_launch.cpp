#include "launch/mpi_launch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>

#include "ddp/dist/launch_env.h"
#include "launch/rank_env.h"
#include "output/line_splitter.h"
#include "output/mpi_output.h"
#include "output/output.h"
#include "output/rank_logs.h"
#include "output/summary.h"
#include "supervise/error_files.h"
#include "supervise/root_cause.h"
#include "supervise/signals.h"
#include "supervise/supervisor.h"

namespace ddprun {

namespace le = ddp::launch_env;

const std::vector<std::string>& mpi_exported_vars() {
  static const std::vector<std::string> vars = {
      le::kOmpNumThreads.name,    le::kBackend.name,   le::kLauncher.name,   le::kLocalWorldSize.name,
      le::kWorldSize.name,        le::kGroupRank.name, le::kMasterAddr.name, le::kMasterPort.name,
      le::kHeartbeatTimeout.name, le::kExitLinger.name};
  return vars;
}

std::vector<std::string> build_mpirun_argv(const Options& options, const LaunchBackend& backend,
                                           const std::string& mpirun_path, const std::string& program_path,
                                           bool as_root) {
  std::vector<std::string> argv = {mpirun_path,       "-np",       std::to_string(options.nproc_per_node),
                                   "--oversubscribe", "--bind-to", "none",
                                   "--tag-output"};
  if (as_root) argv.push_back("--allow-run-as-root");
  std::vector<std::string> vars = mpi_exported_vars();
  if (options.timeout_s) vars.push_back(le::kTimeout.name);
  if (options.rdzv_timeout_s) vars.push_back(le::kRdzvTimeout.name);
  if (!backend.reason.empty()) vars.push_back(le::kBackendReason.name);
  for (const le::EnvVar* var : {&le::kErrorFile, &le::kTty, &le::kRestartCount, &le::kMaxRestarts, &le::kRunId,
                                &le::kRoleName, &le::kRoleWorldSize, &le::kGroupWorldSize})
    vars.push_back(var->name);
  for (const std::string& var : vars) {
    argv.push_back("-x");
    argv.push_back(var);
  }
  argv.push_back(program_path);
  argv.insert(argv.end(), options.program_args.begin(), options.program_args.end());
  return argv;
}

namespace {

// Rewrites mpirun's output lines and watches for failure messages.
class MpirunLines : public LineHandler {
 public:
  explicit MpirunLines(RankLogs* logs) : logs_(logs) {}

  void on_line(size_t, Stream stream, std::string_view line) override {
    if (std::optional<TaggedLine> tagged = demux_.feed(line)) {
      rank_line(*tagged);
      return;
    }
    (void)stream;
    scanner_.feed(line);
    if (!lost_ && (line.find("the job has been aborted") != std::string_view::npos ||
                   line.find("MPI_ABORT was invoked") != std::string_view::npos)) {
      lost_ = true;
      lost_wall_us_ =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    }
    if (line.find_first_not_of(" -") != std::string_view::npos) mpirun_tail_.add(line);
    write_line(STDERR_FILENO, "[mpirun] ", line);
  }

  // mpirun has ended: the ranks' unfinished last lines.
  void finish() {
    for (const TaggedLine& l : demux_.finish()) rank_line(l);
  }

  std::vector<std::string> rank_tail(int rank) const {
    auto it = rank_tails_.find(rank);
    return it == rank_tails_.end() ? std::vector<std::string>() : it->second.lines();
  }
  const TailBuffer& mpirun_tail() const { return mpirun_tail_; }
  std::optional<MpiFailure> failure() const { return scanner_.failure(); }
  // mpirun said it aborts the job: a rank failed (an exit code, a signal or MPI_Abort).
  bool lost() const { return lost_; }
  long long lost_wall_us() const { return lost_wall_us_; }

 private:
  void rank_line(const TaggedLine& l) {
    const Stream rank_stream = l.is_stderr ? Stream::kErr : Stream::kOut;
    logs_->write(l.rank, rank_stream, l.text);
    if (l.is_stderr) rank_tails_[l.rank].add(l.text);
    if (logs_->to_console(rank_stream))
      write_line(l.is_stderr ? STDERR_FILENO : STDOUT_FILENO, rank_prefix(l.rank), l.text);
  }

  MpiLineDemux demux_;
  bool lost_ = false;
  long long lost_wall_us_ = 0;
  std::map<int, TailBuffer> rank_tails_;
  TailBuffer mpirun_tail_{8};
  MpiFailureScanner scanner_;
  RankLogs* logs_;
};

constexpr const char* kExitLinger = "0.5";

// A rank that mpirun saw die of a signal, as the root-cause rules take it: its death is the job's first failure
// (mpirun's "the job has been aborted" came with it); nullopt when mpirun named no such rank.
std::optional<RankOutcome> killed_rank(const MpirunLines& lines, const ChildResult& mpirun) {
  const std::optional<MpiFailure> f = lines.failure();
  if (!f || f->signal <= 0 || !lines.lost()) return std::nullopt;
  RankOutcome r;
  r.rank = f->rank;
  r.pid = f->pid;
  r.exited = true;
  r.status = f->signal;  // the waitpid() status of a death by that signal
  r.exit_wall_us = lines.lost_wall_us();
  r.exit_after_s = mpirun.exit_after_s - static_cast<double>(mpirun.exit_wall_us - r.exit_wall_us) / 1e6;
  return r;
}

}  // namespace

AttemptOutcome run_mpi(const Options& options, const std::string& mpirun_path, const std::string& program_path,
                       const Attempt& attempt) {
  const bool as_root = ::geteuid() == 0;
  const std::vector<std::string> base = current_environment();
  auto vars = node_env_vars(options, attempt, base, online_cpu_count());
  const auto elastic = elastic_env_vars(options, attempt);
  vars.insert(vars.end(), elastic.begin(), elastic.end());
  // mpirun gives its ranks pseudo-terminals but tags their output per chunk: a line redrawn with '\r' would
  // come out garbled, so the ranks print plain lines (DDP_TTY=0; ddp-train's Progress reads it).
  vars.emplace_back(le::kTty.name, "0");
  RankLogs logs(options, attempt.restart_count);
  if (!logs.error().empty()) report("warning: " + logs.error() + "; the ranks' lines go to the console only");
  for (int rank = 0; rank < options.nproc_per_node; ++rank) logs.open_rank(rank);
  // An error file per rank (the ranks fill in "{rank}"). In the attempt's log
  // directory (kept), else a temporary one removed at the end.
  const auto error_dir = error_dir_for(logs.attempt_dir());
  if (!error_dir->error().empty())
    report("warning: " + error_dir->error() + "; the summary cannot name the first error");
  vars.emplace_back(le::kErrorFile.name, error_dir->rank_template());
  // mpirun's kill pause off: when a rank dies, mpirun ends the others at once instead of after 1 + 1 s, and names
  // the dead rank sooner. A rank that exits non-zero waits kExitLinger s first (the ddp runtime reads
  // DDP_EXIT_LINGER), so that peers failing alike record their own errors and preempted peers finish. A value the
  // user set wins.
  if (!find_env(base, le::kOmpiSigkillTimeout.name, nullptr)) vars.emplace_back(le::kOmpiSigkillTimeout.name, "0");
  if (!find_env(base, le::kExitLinger.name, nullptr)) vars.emplace_back(le::kExitLinger.name, kExitLinger);
  if (as_root) {
    vars.emplace_back(le::kOmpiAllowRoot.name, "1");
    vars.emplace_back(le::kOmpiAllowRootConfirm.name, "1");
  }

  ManagedChild mpirun;
  mpirun.spec.exec_path = mpirun_path;
  mpirun.spec.argv = build_mpirun_argv(options, attempt.backend, mpirun_path, program_path, as_root);
  mpirun.spec.env = merge_env(base, vars, {le::kRank.name, le::kLocalRank.name});
  mpirun.spec.label = "mpirun";
  mpirun.signal_group = false;         // stop signals go to its ranks; mpirun ends when they have
  mpirun.spec.death_signal = SIGTERM;  // if ddprun dies, mpirun stops its ranks and exits

  MpirunLines lines(&logs);
  Supervisor supervisor(options.kill_grace_s, &lines);
  // When mpirun aborts the job for a failed rank, the others are blocked in MPI. mpirun ends them at once (its kill
  // pause is off, above); where the user set a pause (odls_base_sigkill_timeout, whole seconds), ddprun ends them
  // after kLostJobGrace_s. Not when ddprun itself stops the job (a forwarded SIGTERM: the ranks may be writing a
  // checkpoint).
  constexpr double kLostJobGrace_s = 0.5;
  supervisor.set_grandchild_kill([&lines] { return lines.lost(); }, kLostJobGrace_s);
  supervisor.set_stop_timeout(options.heartbeat_timeout_s);
  supervisor.set_monitor_interval(options.monitor_interval_s);
  SupervisorResult result = supervisor.run({mpirun});
  lines.finish();
  if (!result.spawn_error.empty()) {
    report(result.spawn_error);
    return {1, result.received_signal > 0};
  }
  const ChildResult& r = result.children.at(0);
  const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
  if (ok && result.received_signal == 0 && result.stalled < 0) return {};

  Summary summary;
  summary.grace_s = options.kill_grace_s;
  summary.received_signal = result.received_signal;
  if (result.received_signal == 0) {
    RootCauseInput cause;
    cause.errors = error_dir->read_all();
    cause.stalled_who = result.stalled_who;
    cause.stalled_signal = result.stalled_signal;
    cause.stalled_for_s = result.stalled_for_s;
    if (const std::optional<RankOutcome> killed = killed_rank(lines, r)) {
      cause.ranks.push_back(*killed);
      cause.failure_wall_us = killed->exit_wall_us;
    }
    summary.root_cause = root_cause_lines(cause);
  }
  std::optional<MpiFailure> f;
  if (result.received_signal == 0 && result.stalled < 0)
    f = lines.failure();  // else the ranks died of the forwarded signal
  if (f) {
    summary.has_failure = true;
    summary.failure.rank = f->rank;
    summary.failure.pid = f->pid;
    if (f->signal > 0) {
      summary.failure.signal = f->signal;
    } else if (f->exit_code >= 0) {
      summary.failure.exit_code = f->exit_code;
    } else if (WIFEXITED(r.status)) {
      summary.failure.exit_code = WEXITSTATUS(r.status);  // best guess: mpirun's code
    } else {
      summary.failure.signal = WTERMSIG(r.status);
    }
    summary.failure.stderr_tail = lines.rank_tail(f->rank);
    summary.notes.push_back("mpirun stopped the other ranks");
  } else if (!ok && result.received_signal == 0 && result.stalled < 0) {
    summary.failure_unknown =
        "mpirun ended with " + describe_wait_status(r.status) + "; its messages did not name a failed rank";
    for (const std::string& l : lines.mpirun_tail().lines()) summary.notes.push_back("  | " + l);
  }
  if (r.sent_kill)
    summary.notes.push_back(result.kill_signal > 0
                                ? "mpirun was killed with SIGKILL after a second " + signal_name(result.kill_signal)
                                : "mpirun was killed with SIGKILL after the grace period");
  summary.notes.push_back("mpirun ended with " + describe_wait_status(r.status));
  // The ranks got the signal from ddprun directly; one that was preempted ended mpirun's job with its code.
  const bool preempted = WIFEXITED(r.status) && WEXITSTATUS(r.status) == kExitPreempted;
  summary.exit_code = result.received_signal > 0
                          ? signalled_exit_code(result.received_signal, preempted, &summary.notes)
                          : exit_code_of_wait_status(r.status);
  if (summary.exit_code == 0 || result.stalled >= 0) summary.exit_code = 1;
  const std::string note = restarts_note(options, attempt, result.received_signal);
  if (!note.empty()) summary.notes.push_back(note);
  summary.final_line = restart_line(options, attempt, result.received_signal > 0);
  print_summary(summary);
  return {summary.exit_code, result.received_signal > 0};
}

}  // namespace ddprun
