// The Trainer's state during fit (a Job), and the set-up steps that build it
// (trainer_setup.cpp) for the loop (trainer.cpp).
#pragma once
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/train/checkpoint.h"
#include "ddp/train/ema.h"
#include "ddp/train/precision.h"
#include "ddp/train/schedule.h"
#include "ddp/train/trainer.h"
#include "strategy/strategy.h"
#include "train_logs.h"
#include "train_state.h"

namespace ddp::train::detail {

struct Job {
  TrainConfig cfg;  // every field set
  GroupPtr group;
  Task task;                    // its test data this rank's share
  at::Device device{at::kCPU};  // where the model trains (--device, resolved on this rank)
  PrecisionChoice precision;    // fp32 or bf16 and why (auto resolves by the CPU, or the GPU)
  LrSchedule schedule = LrSchedule::constant();
  LossFn loss;
  EvalOptions eval_options;
  std::vector<EpochCallback> callbacks;
  std::vector<double> base_lrs;        // each optimizer group's lr at creation: the schedule multiplies it
  std::vector<int64_t> train_epochs;   // each group's ParamGroup::train_epochs (0: always trained)
  std::unique_ptr<Strategy> strategy;  // the model's gradient sync and the optimizer (--strategy)
  std::shared_ptr<CommHook> hook;      // --comm-hook's, if not the built-in path
  torch::nn::AnyModule shadow;         // the EMA's model, when the task averages weights
  std::unique_ptr<ModelEma> ema;
  std::unique_ptr<DistributedSampler> sampler;  // unless the training data is this rank's shard
  std::unique_ptr<data::BatchLoader> loader;
  std::unique_ptr<CheckpointManager> checkpoints;
  TrainLogs logs;
  int64_t micro_per_epoch = 0, steps_per_epoch = 0, total_steps = 0;
  std::string last_checkpoint;
  std::string malloc_note;                      // what keep_freed_memory() did, for the first lines
  std::string backend_reason;                   // how the group's backend was chosen, for the first line ("" if joined)
  std::chrono::steady_clock::time_point start;  // fit's start: the logs' wall_seconds
  double eval_seconds = 0;                      // this epoch's evaluations within it (--eval-every): not training time
};

// Every random stream of a run, derived from the seed in one place.
enum class Stream { kWeights, kDropout, kShardOrder, kAugment };
uint64_t stream_seed(uint64_t seed, Stream stream, int rank, int64_t epoch = 0);

// The settings a Task leaves to the Trainer: unset ones take general defaults (a recipe has filled its own).
void fill_task_defaults(TrainConfig& cfg, const Task& task);
// "auto" takes bf16 only where every rank's device (its CPU, or its GPU) has it natively (a collective).
PrecisionChoice decide_precision(const std::string& name, bool asked, ProcessGroup& group, const at::Device& device);
// --device on this rank; a rank that cannot have it fails every rank, naming it (a collective).
at::Device resolve_job_device(const std::string& spec, ProcessGroup& group);
// Everything before the first step, in j: the task's checks and evaluation share, optimizer, DDP, EMA,
// loader, logs, checkpoints. j.cfg, j.group, j.precision are set.
void set_up(Job& j, Task task);
// With cfg.resume: the state of the newest checkpoint every rank can read, else a fresh start.
LoopState resume_or_start(Job& j);

std::string percent(double v);

}  // namespace ddp::train::detail
