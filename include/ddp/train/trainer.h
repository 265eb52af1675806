// The Trainer: a Task (task.h: model, data, loss, optimizer, metrics) trained
// data-parallel on every rank of a group, with distributed evaluation each
// epoch, logs on rank 0 (progress line, TensorBoard events, JSON lines, report
// page), checkpoints and resume, and callbacks. ddp-train's recipes are Tasks too:
//
//   ddprun --nproc-per-node 2 --standalone build/bin/ddp-train fashion-mnist
//   ddprun --nproc-per-node 2 --standalone build/bin/custom_training   (examples/custom_training)
//
//   ddp::train::TrainConfig settings;         // the settings ddp-train's flags set (config.h)
//   settings.recipe = "my-net";               // the job's name: out_dir runs/my-net, checked on resume
//   settings.epochs = 10;
//   settings.batch_size = 64;                 // per rank
//   ddp::train::Trainer trainer(settings);    // joins the default group (creating it from the launcher's environment)
//   trainer.on_epoch_end(ddp::train::EarlyStopping("loss", 3));
//   ddp::train::TrainSummary done = trainer.fit(std::move(task));
//
// Output layout under settings.out_dir (default runs/<recipe>):
//   tb/events.out.tfevents.*   Loss/train, acc1/train, Loss/val, acc1/val, acc5/val, <metric>/val, lr, throughput
//   metrics.jsonl              one line per log point and per epoch
//   report.html                the run in a browser (report.h)
//   checkpoints/checkpoint-e*-s*.pt, checkpoints/latest
//   shards/                    per-rank training shards (data mode "shards")
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"
#include "ddp/train/evaluate.h"
#include "ddp/train/task.h"

namespace ddp::train {

struct TrainSummary {
  int64_t epochs_done = 0;  // epochs completed, counting those before a resume
  int64_t steps = 0;        // optimizer steps, likewise
  EvalResult eval;          // the last evaluation
  double seconds = 0;       // wall time of this run, start to end
  std::string checkpoint;   // the last checkpoint written ("" if none)
  bool preempted = false;   // stopped by SIGTERM after writing `checkpoint`: exit with kExitPreempted
  std::string stopped;      // why the run ended before its last epoch (--stop-after, a callback), else ""
};

// ddp-train's exit code after a SIGTERM (preemption): the current step finished, a checkpoint was written, and
// a restart resumes from it exactly. 75 is EX_TEMPFAIL ("try again later").
constexpr int kExitPreempted = 75;

// What an on_epoch_end callback sees after each epoch's evaluation (before its checkpoint): the same on every
// rank but train_loss. Setting `stop` ends the training after this epoch (its checkpoint is written); any
// rank's stop stops all, and a callback that throws on any rank ends the run on every rank.
struct EpochEnd {
  int64_t epoch = 0;  // epochs done, 1-based
  int64_t epochs = 0;
  int64_t step = 0;       // optimizer steps done
  double train_loss = 0;  // this rank's mean training loss over the epoch
  EvalResult eval;
  bool stop = false;
  std::string reason;  // why, for the log and TrainSummary::stopped
};
using EpochCallback = std::function<void(EpochEnd&)>;

// What an on_world_change callback sees when ranks were lost and the others went on in place (ddprun --recovery
// inplace), on every rank of the new world, before training goes on. The global batch and the learning rates are
// kept by default; a callback may set lr_scale (a policy of its own): every group's learning rate is multiplied by
// it from the next step on, on every rank (rank 0's value counts; changes multiply).
struct WorldChange {
  int from = 0, to = 0;      // ranks before and after
  int generation = 0;        // the group's generation: 1 after the first change
  int64_t step = 0;          // optimizer steps done: training goes on from here
  int64_t global_batch = 0;  // samples per step, as launched
  double lr_scale = 1.0;
};
using WorldChangeCallback = std::function<void(WorldChange&)>;

// Stops when `metric` ("loss", "acc1", "acc5" or a Task metric's name) has not improved by more than
// min_delta for `patience` epochs in a row. mode "min" (lower is better) or "max"; "auto": min for names
// containing "loss", else max. Its count starts afresh in a resumed run.
class EarlyStopping {
 public:
  explicit EarlyStopping(std::string metric = "loss", int patience = 3, double min_delta = 0,
                         std::string mode = "auto");
  void operator()(EpochEnd& e);
  double best() const { return best_; }

 private:
  std::string metric_;
  int patience_;
  double min_delta_;
  bool maximize_;
  double best_;
  int bad_epochs_ = 0;
};

class Trainer {
 public:
  // Joins `group`, else the default group (creating it as settings.backend says when there is none).
  // Seeds the generator that initialises weights from settings.seed: build the model after this for the seed
  // to decide it (DDP gives every rank rank 0's weights either way). Every rank must pass the same settings
  // (InvalidArgument names those that differ).
  explicit Trainer(TrainConfig settings = {}, GroupPtr group = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // May be changed until fit (which checks them, and that the ranks agree); the weights' seed was taken by the
  // constructor. Settings left unset take general defaults (1 epoch, batch 32, constant lr, no momentum, the
  // optimizer's own learning rates).
  TrainConfig& settings();
  ProcessGroup& group();

  // Called after each epoch's evaluation, in the order added.
  Trainer& on_epoch_end(EpochCallback callback);
  // Called after each change of world (in-place recovery), in the order added.
  Trainer& on_world_change(WorldChangeCallback callback);

  // Trains to settings.epochs (resuming from out_dir's latest checkpoint with settings.resume) and returns on
  // every rank. Errors are exceptions (ddp::Error, InvalidArgument), thrown on every rank; once training has
  // begun, the run's log and report record them too.
  // SIGTERM to any rank: every rank finishes its current step, a checkpoint is written, and fit returns with
  // preempted set. Under an elastic launcher (TORCHELASTIC_RESTART_COUNT > 0) it resumes as with settings.resume.
  TrainSummary fit(Task task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ddp-train: the recipe cfg.recipe built by make_recipe (recipe.h) and trained by a Trainer.
TrainSummary run(TrainConfig cfg);

}  // namespace ddp::train
