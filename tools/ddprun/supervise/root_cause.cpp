#include "supervise/root_cause.h"

#include <sys/wait.h>

#include <cstdio>
#include <ctime>
#include <sstream>

#include "output/output.h"
#include "output/summary.h"
#include "supervise/signals.h"

namespace ddprun {

namespace {

constexpr size_t kMaxMessageLines = 12;
constexpr size_t kMaxFrames = 8;

std::string who(int rank, long pid) {
  return "rank " + std::to_string(rank) + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "");
}

void add_message(std::vector<std::string>& lines, const std::string& message) {
  std::istringstream in(message);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (++n > kMaxMessageLines) {
      lines.push_back("  | ...");
      break;
    }
    lines.push_back("  | " + line);
  }
}

// The innermost frames of where the error was thrown (the whole list is in the error file).
void add_backtrace(std::vector<std::string>& lines, const std::vector<std::string>& frames) {
  if (frames.empty()) return;
  lines.push_back("  thrown at:");
  for (size_t i = 0; i < frames.size() && i < kMaxFrames; ++i)
    lines.push_back("    #" + std::to_string(i) + " " + frames[i]);
  if (frames.size() > kMaxFrames)
    lines.push_back("    ... " + std::to_string(frames.size() - kMaxFrames) + " more in the rank's error file");
}

// The earliest error record, or nullptr; where it says its rank stopped because another failed (a
// PeerFailure, often recorded first), that rank's own record when there is one.
const ErrorRecord* earliest_error(const std::vector<ErrorRecord>& errors) {
  const ErrorRecord* best = nullptr;
  for (const ErrorRecord& e : errors)
    if (best == nullptr || e.timestamp_us < best->timestamp_us) best = &e;
  for (size_t hops = 0; best != nullptr && best->caused_by_rank >= 0 && hops < errors.size(); ++hops) {
    const ErrorRecord* cause = nullptr;
    for (const ErrorRecord& e : errors)
      if (e.rank == best->caused_by_rank && &e != best) cause = &e;
    if (cause == nullptr) break;
    best = cause;
  }
  return best;
}

// The first rank that exited with code 0 while others still ran, before the
// failure; -1 when none.
int earliest_early_exit(const RootCauseInput& in, std::vector<int>* still_running) {
  int best = -1;
  for (size_t i = 0; i < in.ranks.size(); ++i) {
    const RankOutcome& r = in.ranks[i];
    if (!r.exited || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) continue;
    if (r.exit_wall_us >= in.failure_wall_us) continue;
    if (best >= 0 && r.exit_wall_us >= in.ranks[static_cast<size_t>(best)].exit_wall_us) continue;
    std::vector<int> running;
    for (size_t j = 0; j < in.ranks.size(); ++j)
      if (j != i && (!in.ranks[j].exited || in.ranks[j].exit_wall_us > r.exit_wall_us))
        running.push_back(in.ranks[j].rank);
    if (running.empty()) continue;
    best = static_cast<int>(i);
    *still_running = running;
  }
  return best;
}

// A survivor may record "Connection reset by peer" a moment before ddprun reaps the killed peer; an error
// recorded more than this before the kill is one of its own.
constexpr long long kReapLagUs = 1000000;

// The rank whose death by a signal was the job's first failure (ddprun sends its signals only after it), if it
// left no error of its own and no other rank recorded one well before it died; else null.
const RankOutcome* killed_first(const RootCauseInput& in, const ErrorRecord* error) {
  if (in.failure_wall_us <= 0) return nullptr;
  for (const RankOutcome& r : in.ranks) {
    if (!r.exited || !WIFSIGNALED(r.status) || r.exit_wall_us > in.failure_wall_us) continue;
    for (const ErrorRecord& e : in.errors)
      if (e.rank == r.rank) return nullptr;  // it said why itself (e.g. an abort after an error)
    if (error != nullptr && error->timestamp_us + kReapLagUs < r.exit_wall_us) return nullptr;
    return &r;
  }
  return nullptr;
}

}  // namespace

std::string wall_time_text(long long wall_us) {
  std::time_t t = static_cast<std::time_t>(wall_us / 1000000);
  struct tm tm_at;
  char text[32] = "?";
  if (::localtime_r(&t, &tm_at) != nullptr) {
    size_t n = std::strftime(text, sizeof text, "%H:%M:%S", &tm_at);
    std::snprintf(text + n, sizeof text - n, ".%03lld", (wall_us % 1000000) / 1000);
  }
  return text;
}

std::vector<std::string> root_cause_lines(const RootCauseInput& in) {
  std::vector<std::string> lines;
  const ErrorRecord* error = earliest_error(in.errors);
  if (!in.stalled_who.empty()) {
    lines.push_back("root cause: " + in.stalled_who + " was stopped (" +
                    (in.stalled_signal > 0 ? signal_name(in.stalled_signal) : std::string("by a signal")) + ") for " +
                    seconds_text(in.stalled_for_s) + " and did not answer (--heartbeat-timeout)");
    return lines;
  }
  // Decided by evidence, not by whose error came first: a killed rank's peers only report losing it.
  if (const RankOutcome* killed = killed_first(in, error)) {
    lines.push_back("root cause: " + who(killed->rank, killed->pid) + " was killed by " +
                    signal_name(WTERMSIG(killed->status)) + " after " + seconds_text(killed->exit_after_s) +
                    " (it reported no error; something outside the job, e.g. kill or the OOM killer, ended it)");
    if (error != nullptr) {
      lines.push_back("then " + who(error->rank, error->pid) + " reported, at " + wall_time_text(error->timestamp_us) +
                      ":");
      add_message(lines, error->message);
    }
    return lines;
  }
  std::vector<int> running;
  int early = in.failure_wall_us > 0 ? earliest_early_exit(in, &running) : -1;
  const bool early_first =
      early >= 0 && (error == nullptr || in.ranks[static_cast<size_t>(early)].exit_wall_us < error->timestamp_us);
  if (early_first) {
    const RankOutcome& r = in.ranks[static_cast<size_t>(early)];
    lines.push_back("likely root cause: " + who(r.rank, r.pid) + " exited with code 0 after " +
                    seconds_text(r.exit_after_s) + " while rank(s) " + join_ranks(running) + " still ran");
  }
  if (error != nullptr && error->caused_by_rank >= 0 && error->caused_by_rank != error->rank) {
    // A rank that stopped because of another (a PeerFailure: a lost heartbeat, a failed save), which left no error
    // of its own (earliest_error would have taken it): that other rank is the cause.
    long pid = -1;
    for (const RankOutcome& r : in.ranks)
      if (r.rank == error->caused_by_rank) pid = r.pid;
    lines.push_back((early_first ? "then " : "root cause: ") + who(error->caused_by_rank, pid) + ", named by " +
                    who(error->rank, error->pid) + " at " + wall_time_text(error->timestamp_us) + " (rank " +
                    std::to_string(error->caused_by_rank) + " left no error of its own):");
    add_message(lines, error->message);
    return lines;
  }
  if (error != nullptr) {
    lines.push_back((early_first ? "then " : "root cause: ") + who(error->rank, error->pid) +
                    " reported the first error, at " + wall_time_text(error->timestamp_us) + ":");
    add_message(lines, error->message);
    add_backtrace(lines, error->backtrace);
  }
  return lines;
}

}  // namespace ddprun
