// The Trainer's checkpoints: when the state is saved (the policy), where (the manager), and the last one
// written. Saving and resuming need the whole Job: save_checkpoint (fit_parts.h), resume_or_start (trainer_job.h).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "ddp/train/checkpoint.h"
#include "ddp/train/config.h"
#include "train_state.h"

namespace ddp::train::detail {

// Where the loop stands when the policy is asked.
enum class Moment {
  kStep,       // an optimizer step is done
  kPreempted,  // a step is done and a rank got SIGTERM
  kEpochEnd,   // an epoch is done, evaluated and its callbacks run
};

class Checkpoints {
 public:
  Checkpoints() = default;
  // Under cfg.out_dir/checkpoints, keeping cfg.keep_last; every `cfg.checkpoint_every` steps within an epoch.
  Checkpoints(const TrainConfig& cfg, GroupPtr group, int64_t micro_per_epoch);

  // Whether the state `s` is saved at `moment`: always at an epoch's end and on preemption; after a step, each
  // --checkpoint-every steps unless the epoch ends with that step (its end saves).
  bool due(const LoopState& s, Moment moment) const;

  // Rank 0 writes the state make() gives: in the background with --async-save (a save in flight is waited
  // for first), else before returning. Every rank; returns the file.
  std::string save(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make);
  // Every rank: the save in flight finished (its failure thrown on every rank); nothing if none is in flight.
  void wait() { manager_->wait(); }
  // Rank 0, without waiting: whether the save in flight failed (wait() then throws its error).
  bool failed() const { return manager_->failed(); }

  CheckpointManager& manager() { return *manager_; }
  bool active() const { return manager_ != nullptr; }  // false for a default-made one (no run's)
  const std::string& last() const { return last_; }    // "" before the first save or resume
  void set_last(std::string path) { last_ = std::move(path); }

 private:
  std::unique_ptr<CheckpointManager> manager_;
  int64_t every_ = 0, micro_per_epoch_ = 0;
  bool async_ = false;
  std::string last_;
};

}  // namespace ddp::train::detail
