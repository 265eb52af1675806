#include "output/summary.h"

#include <sstream>

#include "output/output.h"
#include "supervise/signals.h"

namespace ddprun {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

namespace {

std::string seconds(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

}  // namespace

std::vector<std::string> format_summary(const Summary& summary) {
  std::vector<std::string> lines;
  lines.push_back("=============== failure summary ===============");
  lines.insert(lines.end(), summary.root_cause.begin(), summary.root_cause.end());
  if (summary.has_failure) {
    const RankFailure& f = summary.failure;
    std::string who = "rank " + std::to_string(f.rank);
    std::vector<std::string> details;
    if (f.local_rank >= 0) details.push_back("local rank " + std::to_string(f.local_rank));
    if (f.pid > 0) details.push_back("pid " + std::to_string(f.pid));
    if (!details.empty()) {
      who += " (";
      for (size_t i = 0; i < details.size(); ++i) who += (i ? ", " : "") + details[i];
      who += ")";
    }
    std::string how = f.signal > 0
                          ? "was killed by signal " + std::to_string(f.signal) + " (" + signal_name(f.signal) + ")"
                          : "exited with code " + std::to_string(f.exit_code);
    lines.push_back("first failed rank: " + who + " " + how);
    if (f.stderr_tail.empty()) {
      lines.push_back("rank " + std::to_string(f.rank) + " wrote nothing on stderr");
    } else {
      lines.push_back("last " + std::to_string(f.stderr_tail.size()) + " stderr line(s) of rank " +
                      std::to_string(f.rank) + ":");
      for (const std::string& l : f.stderr_tail) lines.push_back("  | " + l);
    }
  } else if (!summary.failure_unknown.empty()) {
    lines.push_back(summary.failure_unknown);
  }
  if (summary.received_signal > 0) {
    lines.push_back("received " + signal_name(summary.received_signal) + " and forwarded it to the ranks");
  }
  if (summary.stop_signal > 0) {
    if (summary.stopped_ranks.empty()) {
      lines.push_back("no other rank was still running");
    } else {
      lines.push_back("stopped rank(s) " + join_ranks(summary.stopped_ranks) + " with " +
                      signal_name(summary.stop_signal));
    }
    if (!summary.killed_ranks.empty()) {
      lines.push_back("killed rank(s) " + join_ranks(summary.killed_ranks) + " with SIGKILL " +
                      (summary.kill_signal > 0 ? "after a second " + signal_name(summary.kill_signal)
                                               : "after the " + seconds(summary.grace_s) + " grace period"));
    }
  }
  for (const std::string& note : summary.notes) lines.push_back(note);
  lines.push_back(summary.final_line.empty() ? "exiting with code " + std::to_string(summary.exit_code)
                                             : summary.final_line);
  return lines;
}

void print_summary(const Summary& summary) {
  for (const std::string& line : format_summary(summary)) report(line);
}

}  // namespace ddprun
