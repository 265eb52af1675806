// The training job: a recipe trained data-parallel on every rank of the
// default group, with distributed evaluation each epoch, logs on rank 0
// (progress line, TensorBoard events, JSON lines) and checkpoints.
//
//   ddprun --nproc-per-node 2 --standalone build/bin/ddp-train fashion-mnist
//
// Output layout under cfg.out_dir (default runs/<recipe>):
//   tb/events.out.tfevents.*   Loss/train, Loss/val, acc1/val, acc5/val, lr, throughput
//   metrics.jsonl              one line per log point and per epoch
//   checkpoints/checkpoint-e*-s*.pt, checkpoints/latest
//   shards/                    per-rank training shards (data mode "shards")
#pragma once
#include <string>

#include "ddp/train/config.h"
#include "ddp/train/evaluate.h"

namespace ddp::train {

struct TrainSummary {
  int64_t epochs_done = 0;   // epochs completed, counting those before a resume
  int64_t steps = 0;         // optimizer steps, likewise
  EvalResult eval;           // the last evaluation
  double seconds = 0;        // wall time of this run, start to end
  std::string checkpoint;    // the last checkpoint written ("" if none)
  bool preempted = false;    // stopped by SIGTERM after writing `checkpoint`: exit with kExitPreempted
};

// ddp-train's exit code after a SIGTERM (preemption): the current step finished, a checkpoint was written, and
// a restart resumes from it exactly. 75 is EX_TEMPFAIL ("try again later").
constexpr int kExitPreempted = 75;

// Creates the default process group if none exists (cfg.backend), trains, and
// returns on every rank. Errors are exceptions (ddp::Error, InvalidArgument).
// SIGTERM to any rank during training: every rank finishes its current step, a checkpoint is written, and run
// returns with preempted set (the ranks agree through a one-integer all_reduce overlapped with each step).
// Under an elastic launcher (TORCHELASTIC_RESTART_COUNT > 0) a run resumes from its latest checkpoint as with
// cfg.resume.
TrainSummary run(TrainConfig cfg);

}  // namespace ddp::train
