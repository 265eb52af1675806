// Everything the Trainer prints: rank 0's lines on stdout (above the progress
// line while one is drawn) and warnings on stderr, prefixed "ddp-train: ". One
// sink, so tests can read what a run says (Console(out, err)) and nothing
// else in the training layer writes to the terminal.
#pragma once
#include <iostream>
#include <string>

namespace ddp::train {
class Progress;
}

namespace ddp::train::detail {

class Console {
 public:
  explicit Console(std::ostream& out = std::cout, std::ostream& err = std::cerr) : out_(&out), err_(&err) {}
  // Rank 0 speaks; the others' line() and warning() print nothing.
  void set_leader(bool leader) { leader_ = leader; }
  bool leader() const { return leader_; }
  // While set, lines go through the progress line (it redraws below them).
  void set_progress(Progress* progress) { progress_ = progress; }
  std::ostream& out() const { return *out_; }

  // A line on stdout, rank 0's.
  void line(const std::string& text) const;
  // "ddp-train: warning: <text>" on stderr, rank 0's.
  void warning(const std::string& text) const;
  // "ddp-train: <text>" on stderr, from whichever rank calls it (this rank's own news).
  void rank_message(const std::string& text) const;

 private:
  std::ostream* out_;
  std::ostream* err_;
  bool leader_ = true;
  Progress* progress_ = nullptr;
};

}  // namespace ddp::train::detail
