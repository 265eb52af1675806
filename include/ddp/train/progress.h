// A progress line for training epochs: a live bar on a terminal, plain log
// lines otherwise (files, ddprun's prefixed output, CI logs).
//
//   ddp::train::Progress progress(std::cout);          // bar if stdout is a terminal
//   progress.begin("epoch 3/10", steps);
//   for (int64_t i = 1; i <= steps; ++i)
//     progress.update(i, {{"loss", loss}, {"lr", lr}, {"samples/s", rate}});
//   progress.end("epoch 3/10: val loss 0.3811, accuracy 0.8712");
//
// terminal: epoch 3/10 [=====>              ] 120/469 loss 0.4213 lr 0.01 | 1234 samples/s | eta 0:12
//           (with begin(label, total, run_done, run_total): "... | eta 0:12, run 3:40")
// plain:    epoch 3/10 step 120/469 loss 0.4213 lr 0.01 | 1234 samples/s
// Fields whose name ends in "/s" are rates, printed as "| <value> <name>".
// In a distributed job, show progress on rank 0 only.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace ddp::train {

class Progress {
 public:
  // tty: a live bar redrawn in place with '\r' (at most ~10 times a second, and always on the last step);
  // not a tty: a plain line every `every` steps and on the last one. Default tty = isatty(fileno(stdout)).
  Progress(std::ostream& out, bool tty, int64_t every = 50);
  // tty when `out` is std::cout (std::cerr, std::clog) and stdout (stderr) is a terminal.
  explicit Progress(std::ostream& out);
  // Starts an epoch of `total` steps. label e.g. "epoch 3/10".
  void begin(const std::string& label, int64_t total);
  // The same, and where the epoch lies in the run: `run_done` steps of the run come before its step 1, of
  // `run_total` in all. The bar then also shows the run's ETA: the epoch's time per step so far times the
  // run's steps left (time outside steps, such as evaluation, is not counted).
  void begin(const std::string& label, int64_t total, int64_t run_done, int64_t run_total);
  // step in [1, total]; fields printed in order, numbers with 4 significant digits, e.g. {"loss", 0.4213}, {"lr",
  // 0.01}.
  void update(int64_t step, const std::vector<std::pair<std::string, double>>& fields);
  // Ends the epoch line (newline on a tty) and prints `summary` on its own line if non-empty.
  void end(const std::string& summary = "");
  // A line of its own during an epoch (an evaluation's result): on a terminal the bar moves below it.
  void note(const std::string& text);

  // Whether `out` is std::cout/std::cerr/std::clog writing to a terminal.
  static bool is_terminal(const std::ostream& out);
  // Whether stdout gets the live bar: a terminal, or DDP_TTY=1 in the environment (ddprun sets it when its own
  // stdout is a terminal: the ranks' stdout is then a pipe, and ddprun redraws their '\r' lines in place).
  static bool live_stdout();
  // The ETA text of the bar: seconds per step so far times the steps left, "m:ss" / "h:mm:ss", "-:--" before a step.
  static std::string eta(double elapsed_s, int64_t steps_done, int64_t steps_left);

  using Clock = std::chrono::steady_clock;
  // Replaces the clock (tests pass a fake one); default Clock::now.
  void set_clock(std::function<Clock::time_point()> now) { now_ = std::move(now); }
  // A number as progress lines print it: 4 significant digits ("0.4213", "0.01",
  // "1234"), whole numbers from 10^4 to 10^9 without exponent ("123457").
  static std::string format_number(double value);
  // Seconds as "m:ss" or "h:mm:ss".
  static std::string format_duration(double seconds);

 private:
  std::string line(bool bar) const;
  void draw();

  std::ostream& out_;
  bool tty_;
  int64_t every_;
  int columns_ = 0;  // terminal width when known: bar lines are cut to fit
  bool open_ = false;
  std::string label_;
  int64_t total_ = 0;
  int64_t step_ = 0;
  int64_t first_step_ = 0;  // the first step updated in this epoch (after a resume, not 1)
  int64_t run_done_ = 0, run_total_ = 0;
  std::vector<std::pair<std::string, double>> fields_;
  bool shown_ = true;   // the latest update has been printed
  bool drawn_ = false;  // a bar is on the current terminal line
  Clock::time_point start_, last_draw_;
  std::function<Clock::time_point()> now_ = [] { return Clock::now(); };
};

}  // namespace ddp::train
