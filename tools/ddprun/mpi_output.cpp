#include "mpi_output.h"

#include <regex>
#include <string>

namespace ddprun {

namespace {

// Reads digits at line[*pos]; advances *pos. False when there are none.
bool read_number(std::string_view line, size_t* pos, long* out) {
  size_t start = *pos;
  long value = 0;
  while (*pos < line.size() && line[*pos] >= '0' && line[*pos] <= '9' && *pos - start < 9) {
    value = value * 10 + (line[*pos] - '0');
    ++*pos;
  }
  *out = value;
  return *pos > start;
}

bool consume(std::string_view line, size_t* pos, std::string_view what) {
  if (line.substr(*pos, what.size()) != what) return false;
  *pos += what.size();
  return true;
}

}  // namespace

std::optional<TaggedLine> parse_tagged_line(std::string_view line) {
  size_t pos = 0;
  long job = 0, rank = 0;
  if (!consume(line, &pos, "[") || !read_number(line, &pos, &job) || !consume(line, &pos, ",") ||
      !read_number(line, &pos, &rank) || !consume(line, &pos, "]<"))
    return std::nullopt;
  TaggedLine out;
  out.rank = static_cast<int>(rank);
  if (consume(line, &pos, "stdout>:")) {
    out.is_stderr = false;
  } else if (consume(line, &pos, "stderr>:") || consume(line, &pos, "stddiag>:")) {
    out.is_stderr = true;
  } else {
    return std::nullopt;
  }
  out.text = line.substr(pos);
  return out;
}

void MpiFailureScanner::feed(std::string_view line_view) {
  if (failure_) return;
  static const std::regex process_name(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex exit_code(R"(Exit code:\s*(-?\d+))");
  static const std::regex noticed(
      R"(process rank (\d+) with PID (\d+) on node \S+ exited on signal (\d+))");
  static const std::regex rank_pid(R"(process rank (\d+) with PID (\d+))");

  const std::string line(line_view);
  std::smatch m;
  if (std::regex_search(line, m, process_name)) {
    pending_rank_ = std::stoi(m[1].str());
    return;
  }
  if (pending_rank_ >= 0 && std::regex_search(line, m, exit_code)) {
    MpiFailure f;
    f.rank = pending_rank_;
    f.exit_code = std::stoi(m[1].str());
    failure_ = f;
    return;
  }
  if (std::regex_search(line, m, noticed)) {
    MpiFailure f;
    f.rank = std::stoi(m[1].str());
    long pid = std::stol(m[2].str());
    f.pid = pid > 0 ? pid : -1;
    f.signal = std::stoi(m[3].str());
    failure_ = f;
    return;
  }
  if (!rank_only_ && std::regex_search(line, m, rank_pid)) {
    // e.g. "mpirun has exited due to process rank 1 with PID 123 on" (code unknown)
    MpiFailure f;
    f.rank = std::stoi(m[1].str());
    long pid = std::stol(m[2].str());
    f.pid = pid > 0 ? pid : -1;
    rank_only_ = f;
  }
}

}  // namespace ddprun
