// Each rank's own numbers at the trainer's log points (every --log-every steps),
// carried by the all_reduce that already averages the loss there: no extra collective.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/distributed_data_parallel.h"

namespace ddp::train::detail {

// Where this rank was at the previous log point (or the epoch's start).
struct LogWindow {
  std::chrono::steady_clock::time_point time;
  int64_t micro = 0;  // micro-batches done in the epoch
  DDPStats ddp;       // DDP's cumulative timings
};

struct LogPoint {
  double mean_loss = 0;      // `loss` averaged over the ranks
  double mean_accuracy = 0;  // `accuracy` averaged over the ranks (< 0: not a classification, not logged)
  // samples_per_s/rankR, comm_ms/rankR, exposed_ms/rankR for every rank R: its samples/s since the last point
  // and its DDP communication and exposed (not overlapped with backward) milliseconds per synchronised step.
  std::vector<std::pair<std::string, double>> fields;
};

// One all_reduce (AVG) of 2 + 3 * world doubles: this rank's loss and training accuracy (-1 if none) and, in
// its own slots, its numbers since `window` (each rank puts world * value in its slot, zeros elsewhere: the
// average is the value). Moves `window` to now. Every rank calls it at the same steps.
LogPoint log_point(ProcessGroup& group, double loss, double accuracy, LogWindow& window, int64_t micro,
                   int64_t batch_size, const DDPStats& ddp_now);

// The per-rank fields of a LogPoint from the reduced vector (exposed for tests).
std::vector<std::pair<std::string, double>> rank_fields(const std::vector<double>& reduced, int world);

}  // namespace ddp::train::detail
