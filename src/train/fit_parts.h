// The parts of Trainer::fit (trainer.cpp, the fit loop), each in a file of its own and
// testable through it: the epoch loop, the evaluator, the checkpoint policy; the
// console (console.h) is where all of them print.
#pragma once
#include <signal.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "ddp/train/evaluate.h"
#include "trainer_job.h"

namespace ddp::train::detail {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// Seconds since 1970 (the system clock), so that a benchmark can time a run from its launch.
inline double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// epoch_loop.cpp. While alive, SIGTERM (preemption) and `stop_signal` (--stop-signal: USR1, USR2 or none) are
// noted, and acted on at the next step boundary.
class StopSignalHandler {
 public:
  explicit StopSignalHandler(const std::string& stop_signal = "none");
  ~StopSignalHandler();
  StopSignalHandler(const StopSignalHandler&) = delete;
  StopSignalHandler& operator=(const StopSignalHandler&) = delete;

 private:
  std::vector<std::pair<int, struct sigaction>> old_;
};
// SIGUSR1 for "USR1", SIGUSR2 for "USR2", 0 for "none"; "SIGTERM", "SIGUSR1", ... for a number.
int stop_signal_number(const std::string& name);
std::string stop_signal_name(int sig);
// One epoch from micro-batch s.micro on: data, forward and backward, the step, logs, mid-epoch
// checkpoints and evaluations; a SIGTERM saves and stops (s.preempted). Returns this rank's mean loss.
double train_epoch(Job& j, LoopState& s);

// evaluator.cpp (and its Evaluator, evaluator.h).
// The evaluated model (Averager::evaluated) on this rank's share, reduced over the ranks.
EvalResult evaluate_model(Job& j, bool last = false);
// An evaluation's scalars (TensorBoard, metrics.jsonl), and its text in the log lines.
std::vector<std::pair<std::string, double>> eval_values(const EvalResult& eval);
std::string eval_text(const EvalResult& eval);
// --eval-every: an evaluation between two steps, logged as {"kind": "eval"} for time to accuracy.
void evaluate_within_epoch(Job& j, const LoopState& s);

// checkpoint_policy.cpp (resume_or_start, trainer_job.h, too). Every rank (collectives): the state
// after `s`, once the model is known finite; rank 0 writes it.
void save_checkpoint(Job& j, const LoopState& s);

}  // namespace ddp::train::detail
