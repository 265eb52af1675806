// Progress: the epoch line, as a redrawn bar (terminal) or plain log lines.
#include "ddp/train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"

namespace ddp::train {
namespace {

constexpr int kBarWidth = 20;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

// The file descriptor behind std::cout / std::cerr / std::clog, else -1.
int standard_fd(const std::ostream& out) {
  if (&out == &std::cout) return STDOUT_FILENO;
  if (&out == &std::cerr || &out == &std::clog) return STDERR_FILENO;
  return -1;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Progress::Progress(std::ostream& out, bool tty, int64_t every) : out_(out), tty_(tty), every_(every) {
  if (every < 1) throw InvalidArgument("Progress: every = " + std::to_string(every) + "; print every 1 or more steps");
  int fd = standard_fd(out);
  struct winsize ws {};
  if (tty && fd >= 0 && ::isatty(fd) && ::ioctl(fd, TIOCGWINSZ, &ws) == 0) columns_ = ws.ws_col;
  if (tty && columns_ == 0 && fd >= 0) {  // under ddprun: its terminal's width less its "[rank N] " prefix
    columns_ = launch_env::count(launch_env::kColumns).value_or(0);
  }
}

Progress::Progress(std::ostream& out) : Progress(out, &out == &std::cout ? live_stdout() : is_terminal(out)) {}

bool Progress::live_stdout() {
  // The launcher's word wins: 1 under ddprun on a terminal (the ranks write to pipes), 0 under mpirun (whose
  // ranks write to pseudo-terminals, but its tagged output cannot carry a redrawn line).
  if (auto hint = launch_env::choice(launch_env::kTty)) return *hint == "1";
  return ::isatty(STDOUT_FILENO);
}

std::string Progress::eta(double elapsed_s, int64_t steps_done, int64_t steps_left) {
  if (steps_done < 1) return format_duration(NAN);
  return format_duration(elapsed_s / static_cast<double>(steps_done) *
                         static_cast<double>(std::max<int64_t>(0, steps_left)));
}

bool Progress::is_terminal(const std::ostream& out) {
  int fd = standard_fd(out);
  return fd >= 0 && ::isatty(fd);
}

std::string Progress::format_number(double value) {
  char buf[48];
  double a = std::fabs(value);
  if (std::isfinite(value) && a >= 9999.5 && a < 1e9)
    std::snprintf(buf, sizeof buf, "%.0f", value);
  else
    std::snprintf(buf, sizeof buf, "%.4g", value);
  return buf;
}

std::string Progress::format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "-:--";
  long long s = std::llround(std::max(0.0, seconds));
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

void Progress::begin(const std::string& label, int64_t total) { begin(label, total, 0, 0); }

void Progress::begin(const std::string& label, int64_t total, int64_t run_done, int64_t run_total) {
  if (run_done < 0 || (run_total > 0 && run_done + total > run_total))
    throw InvalidArgument("Progress::begin(\"" + label + "\"): " + std::to_string(run_done) + " steps done + " +
                          std::to_string(total) + " in the epoch exceed the run's " + std::to_string(run_total));
  if (total < 1)
    throw InvalidArgument("Progress::begin(\"" + label + "\"): total = " + std::to_string(total) +
                          "; an epoch needs at least 1 step");
  if (open_) end();
  open_ = true;
  label_ = label;
  total_ = total;
  step_ = 0;
  first_step_ = 0;
  run_done_ = run_done;
  run_total_ = run_total;
  fields_.clear();
  shown_ = true;
  drawn_ = false;
  start_ = now_();
}

void Progress::update(int64_t step, const std::vector<std::pair<std::string, double>>& fields) {
  if (!open_) throw InvalidArgument("Progress::update(" + std::to_string(step) + "): call begin() first");
  if (step < 1 || step > total_)
    throw InvalidArgument("Progress::update: step " + std::to_string(step) + " of \"" + label_ + "\" is outside [1, " +
                          std::to_string(total_) + "]");
  step_ = step;
  if (first_step_ == 0) first_step_ = step;
  fields_ = fields;
  shown_ = false;
  if (tty_) {
    if (!drawn_ || step == total_ || now_() - last_draw_ >= kRedrawInterval) draw();
  } else if (step % every_ == 0 || step == total_) {
    draw();
  }
}

void Progress::end(const std::string& summary) {
  if (!open_) throw InvalidArgument("Progress::end: no epoch to end; call begin() first");
  if (!shown_) draw();  // the latest step, if rate limiting or `every` skipped it
  if (tty_ && drawn_) out_ << '\n';
  if (!summary.empty()) out_ << summary << '\n';
  out_.flush();
  open_ = false;
}

void Progress::note(const std::string& text) {
  if (tty_ && drawn_) out_ << '\n';
  drawn_ = false;
  out_ << text << '\n';
  out_.flush();
}

std::string Progress::line(bool bar) const {
  std::string s = label_;
  if (!s.empty()) s += ' ';
  std::string counts = std::to_string(step_) + "/" + std::to_string(total_);
  if (bar) {
    int filled = static_cast<int>(step_ * kBarWidth / total_);
    std::string cells(kBarWidth, ' ');
    for (int i = 0; i < filled; ++i) cells[i] = '=';
    if (filled < kBarWidth) cells[filled] = '>';
    s += "[" + cells + "] " + counts;
  } else {
    s += "step " + counts;
  }
  for (const auto& [name, value] : fields_) {
    if (ends_with(name, "/s"))
      s += " | " + format_number(value) + " " + name;  // a rate: "| 1234 samples/s"
    else
      s += " " + name + " " + format_number(value);
  }
  if (bar) {
    const double elapsed = std::chrono::duration<double>(now_() - start_).count();
    const int64_t done = step_ - first_step_ + 1;  // steps timed since begin()
    s += " | eta " + eta(elapsed, done, total_ - step_);
    if (run_total_ > 0) s += ", run " + eta(elapsed, done, run_total_ - run_done_ - step_);
  }
  return s;
}

void Progress::draw() {
  if (tty_) {
    std::string l = line(true);
    if (columns_ > 1 && l.size() >= static_cast<size_t>(columns_))
      l.resize(columns_ - 1);  // a wrapped line cannot be redrawn
    out_ << '\r' << l << "\x1b[K" << std::flush;
    drawn_ = true;
    last_draw_ = now_();
  } else {
    out_ << line(false) << '\n' << std::flush;
  }
  shown_ = true;
}

}  // namespace ddp::train
