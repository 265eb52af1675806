// The training job's settings: what `ddp-train RECIPE [flags]` accepts, on the
// command line or from a TOML/INI file (--config FILE; keys are the flags'
// names without "--"). Unset values (empty optionals, empty strings) take the
// recipe's defaults.
//
//   auto cfg = ddp::train::parse_args(argc, argv);   // InvalidArgument on bad flags
//   ddp::train::run(cfg);
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::train {

struct TrainConfig {
  std::string recipe;  // one of recipe_names()
  std::optional<int64_t> epochs;
  std::optional<int64_t> batch_size;               // per rank
  std::optional<double> lr;                        // base learning rate (for the mean loss over the global batch)
  std::string optimizer;                           // sgd | adam | adamw (empty: the recipe's, else sgd)
  std::optional<double> momentum;                  // sgd's
  std::optional<std::pair<double, double>> betas;  // adam's and adamw's (unset: the recipe's, else 0.9,0.999)
  double eps = 1e-8;                               // adam's and adamw's
  std::optional<double> weight_decay;
  std::optional<double> clip_grad;  // the gradients' total norm clipped to this before each step (0: off)
  std::optional<double> label_smoothing;
  std::string schedule;           // see schedule.h
  std::optional<int64_t> warmup;  // warm-up steps
  int64_t accumulate = 1;         // micro-batches per optimizer step (no_sync between)
  std::string data_dir;
  std::string data_mode;              // shards | sampler
  std::optional<int64_t> image_size;  // imagefolder-*: training crop and evaluation centre crop (224)
  int64_t workers = 2;                // imagefolder-*: threads decoding images ahead of training
  std::string out_dir;                // default runs/<recipe>
  uint64_t seed = 0;
  bool resume = false;
  std::string backend = "auto";
  std::string device =
      "auto";            // cpu | cuda | cuda:N | auto (the rank's GPU where CUDA is available): ddp/dist/device.h
  std::string timeline;  // Chrome trace JSON of the run (ddp/dist/timeline.h); empty: DDP_TIMELINE or off
  std::optional<double> timeout;  // seconds a rendezvous/collective may wait; unset: DDP_TIMEOUT, else 600
  int64_t checkpoint_every = 0;   // steps; 0: at the end of each epoch only
  int keep_last = 3;
  bool async_save = true;            // checkpoints copied to host memory at the step and written in the background
  std::string stop_signal = "USR1";  // USR1 | USR2 | none: like SIGTERM, a checkpoint and exit 75 (Slurm's warning)
  bool requeue = false;              // on stop_signal, rank 0 requeues the Slurm job (scontrol requeue)
  int64_t stop_after = 0;            // stop (as if interrupted) after this many epochs; 0: never
  int64_t limit_train = 0;           // use only the first N training samples (0: all)
  int64_t limit_test = 0;
  int64_t log_every = 50;  // steps between train-loss logs
  int64_t eval_batch = 500;
  std::optional<int64_t> eval_every;  // steps between evaluations within an epoch (0: after each epoch only)
  std::optional<int64_t> cutout;      // cutout square size (0: off)
  std::optional<int64_t> ema_every;   // steps between weight averages (0: off)
  std::string precision;              // fp32 | bf16 | auto (bf16 where the CPU has it natively; see precision.h)
  bool progress = true;               // rank 0's progress line
  std::string strategy =
      "ddp";  // how a step is spread over the ranks: ddp | zero1 | fsdp-full | fsdp-grad | hsdp (Lightning's strategy=)
  std::optional<int64_t> hsdp_shard_size;  // --strategy hsdp: ranks that shard the model together (unset: a node's)
  std::string comm_hook = "allreduce";     // how DDP reduces buckets: allreduce | fp16 | bf16 (comm_hook.h)
  bool sync_bn = false;                    // BatchNorm statistics over all ranks (SyncBatchNorm, sync_batch_norm.h)
  bool nan_check = true;                   // stop when the reduced gradients hold NaN or inf, before the step
  std::string nan_check_at;    // step | next-step: when --nan-check's result is read; unset: next-step on a GPU
  bool deterministic = false;  // deterministic kernels only (Lightning's deterministic=True): runs repeat to the bit
};

// What the command line asks for: train, print the help, or print the settings.
struct CommandLine {
  enum class Action { kTrain, kHelp, kPrintConfig };
  Action action = Action::kTrain;
  TrainConfig config;
};

// Parses argv: the recipe (first positional, or `recipe = ...` in --config FILE)
// and flags; flags given on the command line win over the file's. Prints nothing;
// throws InvalidArgument naming the flag (or the file and key).
CommandLine parse_command_line(int argc, const char* const* argv);
// parse_command_line's config; "--help" yields recipe "help".
TrainConfig parse_args(int argc, const char* const* argv);
std::string usage();
// The settings' ranges and names (all but the recipe's): InvalidArgument naming the flag. The Trainer calls it
// on the settings it is given.
void check_settings(const TrainConfig& c);

// The settings as a TOML file that --config reads back (what --print-config prints).
std::string to_config_file(const TrainConfig& c);
// The names of the recipes.
std::vector<std::string> recipe_names();

// key = value pairs of every setting, for logs and checkpoints.
std::vector<std::pair<std::string, std::string>> describe(const TrainConfig& c);

}  // namespace ddp::train
