#include "output/mpi_output.h"

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

namespace {

// "[job,rank]<stdout>:", "<stderr>:" or "<stddiag>:" at line[*pos]; advances *pos past it.
bool read_tag(std::string_view line, size_t* pos, long* job, TaggedLine* out) {
  long rank = 0;
  size_t p = *pos;
  if (!consume(line, &p, "[") || !read_number(line, &p, job) || !consume(line, &p, ",") ||
      !read_number(line, &p, &rank) || !consume(line, &p, "]<"))
    return false;
  if (consume(line, &p, "stdout>:"))
    out->is_stderr = false;
  else if (consume(line, &p, "stderr>:") || consume(line, &p, "stddiag>:"))
    out->is_stderr = true;
  else
    return false;
  out->rank = static_cast<int>(rank);
  *pos = p;
  return true;
}

}  // namespace

std::optional<TaggedLine> MpiLineDemux::feed(std::string_view line) {
  size_t pos = 0;
  long job = 0;
  TaggedLine piece;
  if (!read_tag(line, &pos, &job, &piece)) return std::nullopt;
  // Each further tag of this job ends the piece before it, which waits for the rest of its rank's line.
  for (size_t at = line.find('[', pos); at != std::string_view::npos; at = line.find('[', at + 1)) {
    long next_job = 0;
    TaggedLine next;
    size_t after = at;
    if (!read_tag(line, &after, &next_job, &next) || next_job != job) continue;
    pending_[{piece.rank, piece.is_stderr}].append(line.substr(pos, at - pos));
    piece = next;
    pos = after;
    at = after - 1;
  }
  auto it = pending_.find({piece.rank, piece.is_stderr});
  if (it != pending_.end()) {
    piece.text = std::move(it->second);
    pending_.erase(it);
  }
  piece.text.append(line.substr(pos));
  return piece;
}

std::vector<TaggedLine> MpiLineDemux::finish() {
  std::vector<TaggedLine> out;
  for (auto& [key, text] : pending_) {
    TaggedLine l;
    l.rank = key.first;
    l.is_stderr = key.second;
    l.text = std::move(text);
    out.push_back(std::move(l));
  }
  pending_.clear();
  return out;
}

void MpiFailureScanner::feed(std::string_view line_view) {
  if (failure_) return;
  static const std::regex process_name(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex exit_code(R"(Exit code:\s*(-?\d+))");
  static const std::regex noticed(R"(process rank (\d+) with PID (\d+) on node \S+ exited on signal (\d+))");
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
