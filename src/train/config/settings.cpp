// The table of ddp-train's settings, and the few operations every user of it needs.
#include "settings.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "ddp/dist/device.h"
#include "ddp/errors.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/train/recipe.h"
#include "ddp/train/schedule.h"
#include "train/strategy/strategy.h"

// Entries leave their trailing fields at Setting's defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace ddp::train::detail {
namespace {

using C = TrainConfig;
const char* const kRecipe = "the recipe's default";

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, summary] : strategies()) names.push_back(name);
  return names;
}

// A setting declared by name: set("epochs", &C::epochs, "epochs to train").positive().unset(kRecipe).
class Decl {
 public:
  Decl(std::string name, Field field, std::string help) {
    s_.name = std::move(name);
    s_.field = field;
    s_.help = std::move(help);
  }
  Decl& positive() { return range(Range::kPositive); }
  Decl& non_negative() { return range(Range::kNonNegative); }
  Decl& unit() { return range(Range::kUnit); }
  Decl& role(unsigned r) { return s_.role = r, *this; }
  Decl& unset(std::string meaning) { return s_.unset = std::move(meaning), *this; }
  Decl& choices(std::vector<std::string> values) { return s_.choices = std::move(values), *this; }
  Decl& choices_from(std::function<std::vector<std::string>()> f) { return s_.choices_from = std::move(f), *this; }
  Decl& validate(std::function<void(const std::string&)> f) { return s_.validate = std::move(f), *this; }
  Decl& positional() { return s_.positional = true, *this; }
  operator Setting() const { return s_; }

 private:
  Decl& range(Range r) { return s_.range = r, *this; }
  Setting s_;
};

Decl set(std::string name, Field field, std::string help) { return Decl(std::move(name), field, std::move(help)); }

std::vector<Setting> make_table() {
  return {
      set("recipe", &C::recipe, "the recipe to train: ").positional(),
      set("epochs", &C::epochs, "epochs to train").positive().unset(kRecipe),
      set("batch-size", &C::batch_size, "samples per rank per micro-batch").positive().unset(kRecipe),
      set("lr", &C::lr, "base learning rate (for the mean loss over the global batch)").positive().unset(kRecipe),
      set("optimizer", &C::optimizer, "sgd | adam | adamw (with adam/adamw, --lr defaults to 1e-3)")
          .unset("the recipe's, else sgd")
          .choices({"sgd", "adam", "adamw"}),
      set("momentum", &C::momentum, "sgd's momentum").non_negative().unset(kRecipe),
      set("betas", &C::betas, "adam's and adamw's B1,B2").unit().unset("the recipe's, else 0.9,0.999"),
      set("clip-grad", &C::clip_grad, "clip the gradients' total norm to this before each step (0: off)")
          .non_negative()
          .unset(kRecipe),
      set("eps", &C::eps, "adam's and adamw's epsilon").positive(),
      set("weight-decay", &C::weight_decay, "L2 weight decay").non_negative().unset(kRecipe),
      set("label-smoothing", &C::label_smoothing, "label smoothing of the loss").non_negative().unset(kRecipe),
      set("schedule", &C::schedule,
          "learning rate: constant | step:N:G | cosine[:F] | onecycle[:P[:F]] | piecewise:x:y,...")
          .unset(kRecipe)
          .validate([](const std::string& v) { LrSchedule::parse(v); }),
      set("warmup", &C::warmup, "linear warm-up steps").non_negative().unset(kRecipe),
      set("accumulate", &C::accumulate, "micro-batches per optimizer step (no_sync between)").positive(),
      set("cutout", &C::cutout, "cutout square size (0: off)").non_negative().unset(kRecipe),
      set("ema-every", &C::ema_every, "steps between weight averages (0: off)").non_negative().unset(kRecipe),
      set("precision", &C::precision, "fp32 | bf16 | auto (bf16 where the CPU has it natively)")
          .unset(kRecipe)
          .choices({"fp32", "bf16", "auto"}),
      set("data-dir", &C::data_dir, "the data set's folder (may differ between nodes)").role(kRecorded).unset(kRecipe),
      set("data", &C::data_mode, "shards (each rank loads its own file) | sampler (DistributedSampler)")
          .unset(kRecipe)
          .choices({"shards", "sampler"}),
      set("image-size", &C::image_size, "imagefolder-*: training crop and evaluation centre crop in pixels")
          .positive()
          .unset("imagefolder-* recipes only: 224"),
      set("workers", &C::workers, "imagefolder-*: threads decoding images ahead of training").positive(),
      set("limit-train", &C::limit_train, "use only the first N training samples (0: all)").non_negative(),
      set("limit-test", &C::limit_test, "use only the first N test samples (0: all)").non_negative(),
      set("eval-batch", &C::eval_batch, "samples per evaluation batch").positive().role(kAgreed),
      set("eval-every", &C::eval_every,
          "steps between evaluations within an epoch, for time to accuracy (0: after each epoch only)")
          .non_negative()
          .unset(kRecipe),
      set("out-dir", &C::out_dir, "logs and checkpoints").unset("runs/RECIPE"),
      set("seed", &C::seed, "seed of every random stream"),
      set("resume", &C::resume, "continue from the latest checkpoint in --out-dir").role(kAgreed),
      set("checkpoint-every", &C::checkpoint_every, "steps between checkpoints (0: each epoch)")
          .non_negative()
          .role(kAgreed),
      set("keep-last", &C::keep_last, "checkpoints kept").positive().role(kAgreed),
      set("async-save", &C::async_save,
          "write checkpoints in the background: the state is copied to host memory at the step and a thread writes "
          "it while training goes on (one save in flight; a failed write stops the run at a later step and at the "
          "end); --no-async-save: every rank waits for the file")
          .role(kAgreed),
      set("stop-signal", &C::stop_signal,
          "a signal that, as SIGTERM, makes every rank finish its step, write a checkpoint and exit 75: Slurm's "
          "warning before a time limit (sbatch --signal=USR1@90); none: left to its default action")
          .choices({"USR1", "USR2", "none"})
          .role(kAgreed),
      set("requeue", &C::requeue,
          "after --stop-signal's checkpoint, rank 0 requeues the Slurm job (scontrol requeue $SLURM_JOB_ID), which "
          "resumes from it (Lightning's auto-requeue); SIGTERM (scancel, preemption) never requeues")
          .role(kAgreed),
      set("stop-after", &C::stop_after, "stop (as if interrupted) after N epochs (0: never)")
          .non_negative()
          .role(kAgreed),
      set("log-every", &C::log_every, "steps between train-loss logs").positive().role(kAgreed),
      set("backend", &C::backend,
          "gloo | mpi | nccl | auto (nccl for a GPU device; else ddprun's choice, else mpi under mpirun, else gloo)"),
      set("device", &C::device,
          "auto | cpu | cuda | cuda:N: where the model trains; auto and cuda take the rank's GPU (LOCAL_RANK) where "
          "CUDA is available, auto the CPU elsewhere")
          .validate([](const std::string& v) { check_device_spec(v); }),
      set("timeline", &C::timeline,
          "write a Chrome trace (Perfetto) of data wait, forward, backward, each bucket's reduction, optimizer, "
          "evaluation and checkpoints: FILE.rank{N} per rank, merged into FILE (docs/timeline.md)")
          .role(kAgreed)
          .unset("DDP_TIMELINE, else none"),
      set("timeout", &C::timeout,
          "seconds a rendezvous or collective may wait before failing (ddprun --timeout sets DDP_TIMEOUT)")
          .positive()
          .unset("DDP_TIMEOUT, else 600"),
      set("strategy", &C::strategy, "how a step is spread over the ranks (Lightning's strategy=)")
          .choices_from(strategy_names),
      set("hsdp-shard-size", &C::hsdp_shard_size,
          "--strategy hsdp: the ranks that shard the model together; the world is replicas of them, which "
          "all-reduce their gradients (PyTorch's 2-D mesh); a divisor of the world size")
          .positive()
          .unset("the ranks on a node"),
      set("comm-hook", &C::comm_hook,
          "how DDP reduces gradient buckets: allreduce (float32) | fp16 | bf16 (half the bytes, 16-bit rounding) | "
          "powersgd[:rank=R,start=S,...] | batched_powersgd[:...] (low-rank, docs/ddp.md)")
          .validate([](const std::string& v) { make_comm_hook(v); }),
      set("sync-bn", &C::sync_bn,
          "BatchNorm statistics over the global batch (SyncBatchNorm; 2 small collectives per layer and step)"),
      set("progress", &C::progress, "rank 0's progress line").role(kLocal),
      set("nan-check", &C::nan_check,
          "stop, naming the step and the first parameter, when a gradient becomes NaN or inf (one summing pass "
          "over the gradients per step)")
          .role(kAgreed),
      set("nan-check-at", &C::nan_check_at,
          "when --nan-check reads its result: step (before the step's update, so a non-finite step never reaches "
          "the weights; on a GPU the host waits for the backward pass) | next-step (a step later, so a GPU's queue "
          "never drains: the run stops at the next step, or before a checkpoint, evaluation or log point, with "
          "that step's update applied and never saved)")
          .choices({"step", "next-step"})
          .role(kAgreed)
          .unset("next-step on a GPU (but step under ddprun --recovery inplace), step on the CPU"),
      set("deterministic", &C::deterministic,
          "deterministic kernels only, so that a run (and a resumed one) repeats to the bit on a GPU too: "
          "torch.use_deterministic_algorithms (an operation without one fails, named), cuDNN's deterministic "
          "algorithms without autotuning, cuBLAS's fixed workspace (Lightning's deterministic=True)")
          .role(kAgreed),
  };
}

template <typename T>
struct Optional : std::false_type {};
template <typename T>
struct Optional<std::optional<T>> : std::true_type {};

void check_number(const Setting& s, double v) {
  const bool ok = s.range == Range::kPositive      ? v > 0
                  : s.range == Range::kNonNegative ? v >= 0
                  : s.range == Range::kUnit        ? v >= 0 && v < 1
                                                   : true;
  if (ok) return;
  const char* must = s.range == Range::kPositive      ? "be positive"
                     : s.range == Range::kNonNegative ? "be >= 0"
                                                      : "each be in [0, 1)";
  throw InvalidArgument("ddp-train: " + flag_of(s) + " must " + must + ", got " + shortest(v));
}

// Integers in decimal (std::from_chars; CLI11 2.1 reads them in base 0, "010" as 8); other numbers by CLI11,
// finite only.
template <typename T>
T convert(const Setting& s, const std::string& text) {
  T v{};
  if constexpr (std::is_integral_v<T>) {
    const char* first = text.c_str() + (text.size() > 1 && text[0] == '+' && text[1] != '-' ? 1 : 0);
    const char* last = text.c_str() + text.size();
    auto [end, error] = std::from_chars(first, last, v);
    if (error == std::errc() && end == last && first != last) return v;
  } else {
    if (CLI::detail::lexical_cast(text, v) && std::isfinite(v)) return v;
  }
  throw InvalidArgument("ddp-train: " + flag_of(s) + " expects " +
                        (std::is_integral_v<T> ? "an integer" : "a finite number") + ", got '" + text + "'");
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_table();
  return table;
}

const Setting* find_setting(const std::string& name) {
  for (const auto& s : settings())
    if (s.name == name) return &s;
  return nullptr;
}

std::string flag_of(const Setting& s) { return s.positional ? s.name : "--" + s.name; }

std::string key_of(const Setting& s) {
  std::string k = s.name;
  for (auto& ch : k) ch = ch == '-' ? '_' : ch;
  return k;
}

std::string shortest(double v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

bool is_set(const Setting& s, const TrainConfig& c) {
  return std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        if constexpr (Optional<T>::value)
          return (c.*member).has_value();
        else if constexpr (std::is_same_v<T, std::string>)
          return !(c.*member).empty() || s.unset.empty();
        else
          return true;
      },
      s.field);
}

std::string value_text(const Setting& s, const TrainConfig& c) {
  if (!is_set(s, c)) return "(" + s.unset + ")";
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::decay_t<decltype(c.*member)>;
        const auto& v = c.*member;
        if constexpr (std::is_same_v<T, std::optional<double>>)
          return shortest(*v);
        else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
          return std::to_string(*v);
        else if constexpr (std::is_same_v<T, double>)
          return shortest(v);
        else if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return v;
        else if constexpr (std::is_same_v<T, std::optional<std::pair<double, double>>>)
          return shortest(v->first) + "," + shortest(v->second);
        else
          return std::to_string(v);
      },
      s.field);
}

void set_from_text(const Setting& s, TrainConfig& c, const std::string& text) {
  std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        auto& v = c.*member;
        if constexpr (std::is_same_v<T, std::optional<double>>)
          v = convert<double>(s, text);
        else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
          v = convert<int64_t>(s, text);
        else if constexpr (std::is_same_v<T, uint64_t>) {
          const int64_t n = convert<int64_t>(s, text);  // CLI11 wraps "-1" into 2^64-1 for unsigned types
          if (n < 0) throw InvalidArgument("ddp-train: " + flag_of(s) + " must be >= 0, got " + text);
          v = static_cast<uint64_t>(n);
        } else if constexpr (std::is_same_v<T, std::string>) {
          v = text;
        } else if constexpr (std::is_same_v<T, std::optional<std::pair<double, double>>>) {
          const auto comma = text.find(',');
          if (comma == std::string::npos)
            throw InvalidArgument("ddp-train: " + flag_of(s) + " expects two numbers as B1,B2 (e.g. 0.9,0.999), got '" +
                                  text + "'");
          v = std::make_pair(convert<double>(s, text.substr(0, comma)), convert<double>(s, text.substr(comma + 1)));
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text != "true" && text != "false")
            throw InvalidArgument("ddp-train: " + flag_of(s) + " expects true or false, got '" + text + "'");
          v = text == "true";
        } else {
          v = convert<T>(s, text);
        }
      },
      s.field);
}

void copy_value(const Setting& s, const TrainConfig& from, TrainConfig& to) {
  std::visit([&](auto member) { to.*member = from.*member; }, s.field);
}

void check_value(const Setting& s, const TrainConfig& c) {
  if (!is_set(s, c)) return;
  std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        const auto& v = c.*member;
        if constexpr (std::is_same_v<T, std::optional<std::pair<double, double>>>)
          check_number(s, v->first), check_number(s, v->second);
        else if constexpr (Optional<T>::value)
          check_number(s, double(*v));
        else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
          check_number(s, double(v));
        else if constexpr (std::is_same_v<T, std::string>) {
          const auto choices = s.choices_from ? s.choices_from() : s.choices;
          if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
            throw InvalidArgument("ddp-train: unknown " + s.name + " '" + v + "'; valid: " + join(choices));
          if (s.validate) {
            try {
              s.validate(v);
            } catch (const InvalidArgument& e) {
              throw InvalidArgument("ddp-train: " + flag_of(s) + ": " + e.what());
            }
          }
        }
      },
      s.field);
}

}  // namespace ddp::train::detail
