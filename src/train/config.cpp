// ddp-train's command line on CLI11: the recipe, then flags, or all of it
// from a TOML/INI file (--config); --print-config writes such a file.
#include "ddp/train/config.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <functional>
#include <sstream>

#include "ddp/errors.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/train/precision.h"

namespace ddp::train {
namespace {

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, double>) v = std::stod(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) v = text.find('-') == std::string::npos ? std::stoull(text, &used) : 0;
    else v = static_cast<T>(std::stoll(text, &used));
    if (used == text.size() && !text.empty()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("ddp-train: " + flag + " expects a number, got '" + text + "'");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A flag taking a number into `field` (an optional or a plain value).
template <typename T, typename Field>
void number_flag(CLI::App& app, const std::string& name, Field& field, const std::string& help) {
  app.add_option_function<std::string>(
         "--" + name, [&field, name](const std::string& v) { field = parse_number<T>("--" + name, v); }, help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(std::is_integral_v<T> ? "N" : "X");
}

void text_flag(CLI::App& app, const std::string& name, std::string& field, const std::string& help) {
  app.add_option("--" + name, field, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->type_name("TEXT");
}

// Every setting of ddp-train, bound to `c`.
void define(CLI::App& app, TrainConfig& c, bool& print_config) {
  app.description("Trains a recipe, single-process or under ddprun (one process per rank).");
  app.footer("Unset settings take the recipe's defaults; --print-config shows them all.\n"
             "Each run writes OUT/report.html; `ddp-train report RUN_DIR [RUN_DIR...] [-o page.html]` rebuilds it\n"
             "or puts several runs side by side (ddp-train report --help).\n"
             "Exit status: 0 done, 1 failed, 2 bad flags.");
  app.set_help_flag("-h,--help", "show this help");
  app.add_option("recipe", c.recipe, "one of " + join(recipe_names()));
  app.set_config("--config", "", "read settings from a TOML or INI file (keys: the flags without --)")
      ->type_name("FILE");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_flag("--print-config", print_config, "print every setting, recipe defaults resolved, as a --config file");
  number_flag<int64_t>(app, "epochs", c.epochs, "epochs to train");
  number_flag<int64_t>(app, "batch-size", c.batch_size, "samples per rank per micro-batch");
  number_flag<double>(app, "lr", c.lr, "base learning rate (for the mean loss over the global batch)");
  text_flag(app, "optimizer", c.optimizer, "sgd | adam | adamw (with adam/adamw, --lr defaults to 1e-3)");
  number_flag<double>(app, "momentum", c.momentum, "sgd's momentum");
  app.add_option_function<std::string>(
         "--betas",
         [&c](const std::string& v) {
           const auto comma = v.find(',');
           if (comma == std::string::npos)
             throw InvalidArgument("ddp-train: --betas expects two numbers as B1,B2 (e.g. 0.9,0.999), got '" + v + "'");
           c.betas = {parse_number<double>("--betas", v.substr(0, comma)),
                      parse_number<double>("--betas", v.substr(comma + 1))};
         },
         "adam's and adamw's B1,B2 [default 0.9,0.999]")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  number_flag<double>(app, "eps", c.eps, "adam's and adamw's epsilon [default 1e-8]");
  number_flag<double>(app, "weight-decay", c.weight_decay, "L2 weight decay");
  number_flag<double>(app, "label-smoothing", c.label_smoothing, "label smoothing of the loss");
  text_flag(app, "schedule", c.schedule,
            "learning rate: constant | step:N:G | cosine[:F] | onecycle[:P[:F]] | piecewise:x:y,...");
  number_flag<int64_t>(app, "warmup", c.warmup, "linear warm-up steps");
  number_flag<int64_t>(app, "accumulate", c.accumulate, "micro-batches per optimizer step (no_sync between)");
  number_flag<int64_t>(app, "cutout", c.cutout, "cutout square size (0: off)");
  number_flag<int64_t>(app, "ema-every", c.ema_every, "steps between weight averages (0: off)");
  app.add_option_function<std::string>(
         "--precision", [&c](const std::string& v) { c.precision = v == "auto" ? v : to_string(parse_precision(v)); },
         "fp32 | bf16 | auto (bf16 where the CPU has it natively)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  text_flag(app, "data-dir", c.data_dir, "the data set's folder");
  text_flag(app, "data", c.data_mode, "shards (each rank loads its own file) | sampler (DistributedSampler)");
  number_flag<int64_t>(app, "image-size", c.image_size,
                       "imagefolder-*: training crop and evaluation centre crop in pixels [default 224]");
  number_flag<int64_t>(app, "workers", c.workers, "imagefolder-*: threads decoding images ahead of training [default 2]");
  number_flag<int64_t>(app, "limit-train", c.limit_train, "use only the first N training samples (0: all)");
  number_flag<int64_t>(app, "limit-test", c.limit_test, "use only the first N test samples (0: all)");
  number_flag<int64_t>(app, "eval-batch", c.eval_batch, "samples per evaluation batch");
  number_flag<int64_t>(app, "eval-every", c.eval_every,
                       "steps between evaluations within an epoch, for time to accuracy (0: after each epoch only)");
  text_flag(app, "out-dir", c.out_dir, "logs and checkpoints (default runs/RECIPE)");
  number_flag<uint64_t>(app, "seed", c.seed, "seed of every random stream");
  app.add_flag("--resume", c.resume, "continue from the latest checkpoint in --out-dir");
  number_flag<int64_t>(app, "checkpoint-every", c.checkpoint_every, "steps between checkpoints (0: each epoch)");
  number_flag<int>(app, "keep-last", c.keep_last, "checkpoints kept");
  number_flag<int64_t>(app, "stop-after", c.stop_after, "stop (as if interrupted) after N epochs (0: never)");
  number_flag<int64_t>(app, "log-every", c.log_every, "steps between train-loss logs");
  text_flag(app, "backend", c.backend, "gloo | mpi | auto (ddprun's choice, else mpi under mpirun, else gloo)");
  text_flag(app, "timeline", c.timeline,
            "write a Chrome trace (Perfetto) of data wait, forward, backward, each bucket's reduction, optimizer, "
            "evaluation and checkpoints: FILE.rank{N} per rank, merged into FILE (docs/timeline.md)");
  number_flag<double>(app, "timeout", c.timeout,
                      "seconds a rendezvous or collective may wait before failing [default: DDP_TIMEOUT "
                      "(ddprun --timeout), else 600]");
  text_flag(app, "comm-hook", c.comm_hook,
            "how DDP reduces gradient buckets: allreduce (float32) | fp16 | bf16 (half the bytes, 16-bit rounding) | "
            "powersgd[:rank=R,start=S,...] | batched_powersgd[:...] (low-rank, docs/ddp.md)");
  app.add_flag("--sync-bn", c.sync_bn,
               "BatchNorm statistics over the global batch (SyncBatchNorm; 2 small collectives per layer and step)");
  app.add_flag("--progress,!--no-progress", c.progress, "rank 0's progress line (on by default)");
  app.add_flag("--nan-check,!--no-nan-check", c.nan_check,
               "stop, naming the step and the first parameter, when a gradient becomes NaN or inf (on by default; "
               "one summing pass over the gradients per step)");
}

void check_ranges(const TrainConfig& c) {
  bool known = false;
  for (const auto& n : recipe_names()) known |= n == c.recipe;
  if (!known) throw InvalidArgument("ddp-train: unknown recipe '" + c.recipe + "'; valid: " + join(recipe_names()));
  check_settings(c);
}

}  // namespace

void check_settings(const TrainConfig& c) {
  auto positive = [](const char* flag, double v) {
    if (!(v > 0)) throw InvalidArgument(std::string("ddp-train: ") + flag + " must be positive");
  };
  auto non_negative = [](const char* flag, double v) {
    if (!(v >= 0)) throw InvalidArgument(std::string("ddp-train: ") + flag + " must be >= 0");
  };
  if (c.epochs) positive("--epochs", double(*c.epochs));
  if (c.batch_size) positive("--batch-size", double(*c.batch_size));
  if (c.lr) positive("--lr", *c.lr);
  if (c.timeout) positive("--timeout", *c.timeout);
  if (c.momentum) non_negative("--momentum", *c.momentum);
  if (c.weight_decay) non_negative("--weight-decay", *c.weight_decay);
  if (c.label_smoothing) non_negative("--label-smoothing", *c.label_smoothing);
  if (c.warmup) non_negative("--warmup", double(*c.warmup));
  if (c.cutout) non_negative("--cutout", double(*c.cutout));
  if (c.ema_every) non_negative("--ema-every", double(*c.ema_every));
  positive("--accumulate", double(c.accumulate));
  positive("--workers", double(c.workers));
  if (c.image_size) positive("--image-size", double(*c.image_size));
  positive("--log-every", double(c.log_every));
  positive("--eval-batch", double(c.eval_batch));
  if (c.eval_every) non_negative("--eval-every", double(*c.eval_every));
  positive("--keep-last", c.keep_last);
  if (!c.data_mode.empty() && c.data_mode != "shards" && c.data_mode != "sampler")
    throw InvalidArgument("ddp-train: --data must be shards or sampler, got '" + c.data_mode + "'");
  if (c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw")
    throw InvalidArgument("ddp-train: --optimizer must be sgd, adam or adamw, got '" + c.optimizer + "'");
  for (double b : {c.betas.first, c.betas.second})
    if (!(b >= 0 && b < 1)) throw InvalidArgument("ddp-train: --betas must each be in [0, 1)");
  positive("--eps", c.eps);
  try {
    make_comm_hook(c.comm_hook);  // names and PowerSGD options checked here, before any data is read
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("ddp-train: --comm-hook: ") + e.what());
  }
  if (c.checkpoint_every < 0 || c.stop_after < 0 || c.limit_train < 0 || c.limit_test < 0)
    throw InvalidArgument("ddp-train: --checkpoint-every, --stop-after, --limit-train and --limit-test must be >= 0");
}


std::vector<std::string> recipe_names() {
  return {"mlp",           "fashion-mnist",    "fashion-mnist-fast",   "cifar10-resnet9",
          "cifar10-resnet18", "cifar10-airbench", "imagefolder-resnet18", "imagefolder-resnet50"};
}

std::string usage() {
  TrainConfig ignored;
  bool print = false;
  CLI::App app("", "ddp-train");
  define(app, ignored, print);
  return app.help();
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine out;
  bool print_config = false;
  CLI::App app("", "ddp-train");
  define(app, out.config, print_config);
  try {
    std::vector<std::string> args;
    for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    out.action = CommandLine::Action::kHelp;
    out.config.recipe = "help";
    return out;
  } catch (const CLI::ParseError& e) {
    throw InvalidArgument(std::string("ddp-train: ") + e.what() + " (see ddp-train --help)");
  }
  if (out.config.recipe.empty())
    throw InvalidArgument("ddp-train: missing the recipe (one of " + join(recipe_names()) +
                          "), as the first argument or `recipe = ...` in --config; see ddp-train --help");
  check_ranges(out.config);
  if (print_config) out.action = CommandLine::Action::kPrintConfig;
  return out;
}

TrainConfig parse_args(int argc, const char* const* argv) { return parse_command_line(argc, argv).config; }

std::string to_config_file(const TrainConfig& c) {
  std::ostringstream out;
  auto text = [&](const char* key, const std::string& v) {
    if (v.find_first_of("\"\\\n") != std::string::npos)
      throw InvalidArgument(std::string("ddp-train: --print-config: the value of ") + key +
                            " holds a quote, backslash or newline, which the config file cannot carry");
    out << key << " = \"" << v << "\"\n";
  };
  auto real = [&](const char* key, std::optional<double> v) {
    if (!v) return void(out << "# " << key << " = (the recipe's default)\n");
    char buf[32];
    auto res = std::to_chars(buf, buf + sizeof buf, *v);  // shortest text that reads back to v
    out << key << " = " << std::string(buf, res.ptr) << "\n";
  };
  auto count = [&](const char* key, std::optional<int64_t> v) {
    if (!v) return void(out << "# " << key << " = (the recipe's default)\n");
    out << key << " = " << *v << "\n";
  };
  auto flag = [&](const char* key, bool v) { out << key << " = " << (v ? "true" : "false") << "\n"; };
  out << "# ddp-train settings; run them with: ddp-train --config FILE\n";
  text("recipe", c.recipe);
  count("epochs", c.epochs);
  count("batch-size", c.batch_size);
  real("lr", c.lr);
  text("optimizer", c.optimizer);
  real("momentum", c.momentum);
  {
    char b1[32], b2[32];
    auto e1 = std::to_chars(b1, b1 + sizeof b1, c.betas.first).ptr, e2 = std::to_chars(b2, b2 + sizeof b2, c.betas.second).ptr;
    text("betas", std::string(b1, e1) + "," + std::string(b2, e2));
  }
  real("eps", c.eps);
  real("weight-decay", c.weight_decay);
  real("label-smoothing", c.label_smoothing);
  text("schedule", c.schedule);
  count("warmup", c.warmup);
  count("accumulate", c.accumulate);
  count("cutout", c.cutout);
  count("ema-every", c.ema_every);
  text("precision", c.precision);
  text("data-dir", c.data_dir);
  text("data", c.data_mode);
  if (c.image_size) count("image-size", c.image_size);  // imagefolder-* only
  count("workers", c.workers);
  count("limit-train", c.limit_train);
  count("limit-test", c.limit_test);
  count("eval-batch", c.eval_batch);
  count("eval-every", c.eval_every);
  text("out-dir", c.out_dir);
  out << "seed = " << c.seed << "\n";
  flag("resume", c.resume);
  count("checkpoint-every", c.checkpoint_every);
  count("keep-last", c.keep_last);
  count("stop-after", c.stop_after);
  count("log-every", c.log_every);
  text("backend", c.backend);
  if (!c.timeline.empty()) text("timeline", c.timeline);
  if (c.timeout) real("timeout", c.timeout);
  else out << "# timeout = (DDP_TIMEOUT, else 600)\n";
  text("comm-hook", c.comm_hook);
  flag("sync-bn", c.sync_bn);
  flag("progress", c.progress);
  flag("nan-check", c.nan_check);
  return out.str();
}

std::vector<std::pair<std::string, std::string>> describe(const TrainConfig& c) {
  auto num = [](std::optional<double> v) {
    if (!v) return std::string("(recipe default)");
    std::ostringstream o;
    o << *v;
    return o.str();
  };
  auto count = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : std::string("(recipe default)"); };
  return {{"recipe", c.recipe},
          {"epochs", count(c.epochs)},
          {"batch_size", count(c.batch_size)},
          {"lr", num(c.lr)},
          {"optimizer", c.optimizer},
          {"momentum", num(c.momentum)},
          {"betas", num(c.betas.first) + "," + num(c.betas.second)},
          {"eps", num(c.eps)},
          {"weight_decay", num(c.weight_decay)},
          {"label_smoothing", num(c.label_smoothing)},
          {"schedule", c.schedule},
          {"warmup", count(c.warmup)},
          {"accumulate", std::to_string(c.accumulate)},
          {"data_dir", c.data_dir},
          {"data_mode", c.data_mode},
          {"image_size", count(c.image_size)},
          {"workers", std::to_string(c.workers)},
          {"out_dir", c.out_dir},
          {"seed", std::to_string(c.seed)},
          {"backend", c.backend},
          {"timeout", c.timeout ? num(c.timeout) : std::string("(DDP_TIMEOUT, else 600)")},
          {"comm_hook", c.comm_hook},
          {"sync_bn", c.sync_bn ? "true" : "false"},
          {"cutout", count(c.cutout)},
          {"ema_every", count(c.ema_every)},
          {"eval_every", count(c.eval_every)},
          {"precision", c.precision},
          {"limit_train", std::to_string(c.limit_train)},
          {"limit_test", std::to_string(c.limit_test)}};
}

}  // namespace ddp::train
