// The Trainer's state during fit (a Job), and the set-up steps that build it
// (trainer_setup.cpp) for the loop (trainer.cpp).
#pragma once
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "averager.h"
#include "checkpoint_policy.h"
#include "ddp/dist/membership.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/train/precision.h"
#include "ddp/train/trainer.h"
#include "evaluator.h"
#include "inplace.h"
#include "learning_rates.h"
#include "random_streams.h"
#include "strategy/strategy.h"
#include "train_data.h"
#include "train_logs.h"
#include "train_state.h"

namespace ddp::train::detail {

struct HeldState;  // inplace.cpp: what a rank holds while its world changes

// Each part owns its state; the Job holds the parts and what the whole run shares.
struct Job {
  // The run: settings, group, device and precision; what its first lines say.
  TrainConfig cfg;  // every field set
  GroupPtr group;
  at::Device device{at::kCPU};                  // where the model trains (--device, resolved on this rank)
  PrecisionChoice precision;                    // fp32 or bf16 and why (auto resolves by the CPU, or the GPU)
  std::string malloc_note;                      // what keep_freed_memory() did, for the first lines
  std::string backend_reason;                   // how the group's backend was chosen, for the first line ("" if joined)
  std::string placement;                        // what srun's variables gave (slurm_env.h), for the first lines
  std::chrono::steady_clock::time_point start;  // fit's start: the logs' wall_seconds
  // ddprun --recovery inplace: the membership whose group `group` is (inplace.h), and the world it started
  // with, whose epochs and global batches every later world trains. Null otherwise.
  Membership* membership = nullptr;
  std::unique_ptr<Membership> owned_membership;  // the membership, once fit has it
  bool joining = false;                          // a replacement set up on a world of its own, to join (DDP_JOIN=1)
  std::shared_ptr<HeldState> held;               // while a change of world is under way (inplace.cpp)
  CommittedBuffers committed_buffers;            // the model's buffers at the last completed step
  int launch_world = 0;
  std::vector<WorldChangeCallback> on_world_change;
  double lr_scale = 1.0;  // what on_world_change callbacks asked for, multiplied

  // The model and how it trains: the Task's model (its data is in `data` and `evaluator`), the strategy (the
  // gradient sync and the optimizer, --strategy), the comm hook (if not the built-in path), the loss.
  Task task;
  std::unique_ptr<Strategy> strategy;
  std::shared_ptr<CommHook> hook;
  LossFn loss;
  LearningRates lr;
  Averager average;

  TrainData data;
  Evaluator evaluator;
  Checkpoints checkpoints;
  TrainLogs logs;
  std::vector<EpochCallback> callbacks;
  double eval_seconds = 0;  // this epoch's evaluations within it (--eval-every): not training time
};

// The settings a Task leaves to the Trainer: unset ones take general defaults (a recipe has filled its own).
void fill_task_defaults(TrainConfig& cfg, const Task& task);
// "auto" takes bf16 only where every rank's device (its CPU, or its GPU) has it natively (a collective).
PrecisionChoice decide_precision(const std::string& name, bool asked, ProcessGroup& group, const at::Device& device);
// --nan-check-at unset: next-step where a read would make the host wait for the device's queue (a GPU), unless
// the job recovers in place (a lost rank's recovery adopts the last step's weights, which must be known finite:
// check_recoverable refuses next-step there); step elsewhere.
std::string default_nan_check_at(const at::Device& device, bool in_place);
// --device on this rank; a rank that cannot have it fails every rank, naming it (a collective).
at::Device resolve_job_device(const std::string& spec, ProcessGroup& group);
// --deterministic while alive (ATen's, cuDNN's and cuBLAS's deterministic settings); the previous ones after.
class DeterministicScope {
 public:
  explicit DeterministicScope(bool on);
  ~DeterministicScope();
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool on_, algorithms_ = false, warn_only_ = false, cudnn_deterministic_ = false, cudnn_benchmark_ = false;
};
// Everything before the first step, in j's parts: the task's checks, optimizer and strategy, learning rates,
// average, training data, evaluator, logs, checkpoints. j.cfg, j.group, j.device, j.precision are set.
void set_up(Job& j, Task task);
// The parts built over j.group, again (in-place recovery changed it): evaluator, comm hook, strategy and
// optimizer (fresh state), learning rates, training data, checkpoints.
void set_up_group_parts(Job& j);
// The training data and checkpoints again, over j.launch_world (a resumed in-place run takes its checkpoint's).
void set_up_data_parts(Job& j);
// With cfg.resume: the state of the newest checkpoint every rank can read, else a fresh start.
LoopState resume_or_start(Job& j);

std::string percent(double v);

}  // namespace ddp::train::detail
