#include "ddp/train/config.h"

#include "ddp/train/precision.h"

#include <functional>
#include <map>
#include <sstream>

#include "ddp/errors.h"

namespace ddp::train {
namespace {

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, double>) v = std::stod(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) v = std::stoull(text, &used);
    else v = static_cast<T>(std::stoll(text, &used));
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("ddp-train: " + flag + " expects a number, got '" + text + "'");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> recipe_names() { return {"mlp", "fashion-mnist", "cifar10-resnet9", "cifar10-resnet18"}; }

std::string usage() {
  return "usage: ddp-train RECIPE [flags]     (under ddprun for several ranks)\n"
         "recipes: " + join(recipe_names()) + "\n"
         "  --epochs N  --batch-size N (per rank)  --lr X  --momentum X  --weight-decay X\n"
         "  --schedule SPEC (constant | step:N:G | cosine[:F] | onecycle[:P[:F]] | piecewise:x:y,...)  --warmup STEPS\n"
         "  --label-smoothing X  --accumulate N  --cutout N  --ema-every N (0: off)  --precision fp32|bf16|auto\n"
         "  --data-dir DIR  --data shards|sampler  --limit-train N  --limit-test N  --eval-batch N\n"
         "  --out-dir DIR (default runs/RECIPE)  --seed N  --resume  --checkpoint-every STEPS  --keep-last K\n"
         "  --stop-after EPOCHS  --log-every STEPS  --backend gloo|mpi|auto  --no-progress\n";
}

TrainConfig parse_args(int argc, const char* const* argv) {
  TrainConfig c;
  if (argc < 2) throw InvalidArgument("ddp-train: missing the recipe (one of " + join(recipe_names()) + ")\n" + usage());
  c.recipe = argv[1];
  if (c.recipe == "--help" || c.recipe == "-h") {
    c.recipe = "help";
    return c;
  }
  bool known = false;
  for (const auto& n : recipe_names()) known |= n == c.recipe;
  if (!known) throw InvalidArgument("ddp-train: unknown recipe '" + c.recipe + "'; valid: " + join(recipe_names()));

  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--epochs", [&](auto& v) { c.epochs = parse_number<int64_t>("--epochs", v); }},
      {"--batch-size", [&](auto& v) { c.batch_size = parse_number<int64_t>("--batch-size", v); }},
      {"--lr", [&](auto& v) { c.lr = parse_number<double>("--lr", v); }},
      {"--momentum", [&](auto& v) { c.momentum = parse_number<double>("--momentum", v); }},
      {"--weight-decay", [&](auto& v) { c.weight_decay = parse_number<double>("--weight-decay", v); }},
      {"--label-smoothing", [&](auto& v) { c.label_smoothing = parse_number<double>("--label-smoothing", v); }},
      {"--schedule", [&](auto& v) { c.schedule = v; }},
      {"--warmup", [&](auto& v) { c.warmup = parse_number<int64_t>("--warmup", v); }},
      {"--accumulate", [&](auto& v) { c.accumulate = parse_number<int64_t>("--accumulate", v); }},
      {"--data-dir", [&](auto& v) { c.data_dir = v; }},
      {"--data", [&](auto& v) { c.data_mode = v; }},
      {"--out-dir", [&](auto& v) { c.out_dir = v; }},
      {"--seed", [&](auto& v) { c.seed = parse_number<uint64_t>("--seed", v); }},
      {"--backend", [&](auto& v) { c.backend = v; }},
      {"--checkpoint-every", [&](auto& v) { c.checkpoint_every = parse_number<int64_t>("--checkpoint-every", v); }},
      {"--keep-last", [&](auto& v) { c.keep_last = parse_number<int>("--keep-last", v); }},
      {"--stop-after", [&](auto& v) { c.stop_after = parse_number<int64_t>("--stop-after", v); }},
      {"--limit-train", [&](auto& v) { c.limit_train = parse_number<int64_t>("--limit-train", v); }},
      {"--limit-test", [&](auto& v) { c.limit_test = parse_number<int64_t>("--limit-test", v); }},
      {"--log-every", [&](auto& v) { c.log_every = parse_number<int64_t>("--log-every", v); }},
      {"--eval-batch", [&](auto& v) { c.eval_batch = parse_number<int64_t>("--eval-batch", v); }},
      {"--cutout", [&](auto& v) { c.cutout = parse_number<int64_t>("--cutout", v); }},
      {"--ema-every", [&](auto& v) { c.ema_every = parse_number<int64_t>("--ema-every", v); }},
      {"--precision", [&](auto& v) { c.precision = v == "auto" ? v : to_string(parse_precision(v)); }},
  };
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--resume") c.resume = true;
    else if (flag == "--no-progress") c.progress = false;
    else if (auto it = with_value.find(flag); it != with_value.end()) {
      if (!inline_value) {
        if (i + 1 >= argc) throw InvalidArgument("ddp-train: " + flag + " needs a value");
        value = argv[++i];
      }
      it->second(value);
    } else {
      throw InvalidArgument("ddp-train: unknown flag '" + flag + "'\n" + usage());
    }
  }
  auto positive = [](const char* flag, double v) {
    if (!(v > 0)) throw InvalidArgument(std::string("ddp-train: ") + flag + " must be positive");
  };
  auto non_negative = [](const char* flag, double v) {
    if (!(v >= 0)) throw InvalidArgument(std::string("ddp-train: ") + flag + " must be >= 0");
  };
  if (c.epochs) positive("--epochs", double(*c.epochs));
  if (c.batch_size) positive("--batch-size", double(*c.batch_size));
  if (c.lr) positive("--lr", *c.lr);
  if (c.momentum) non_negative("--momentum", *c.momentum);
  if (c.weight_decay) non_negative("--weight-decay", *c.weight_decay);
  if (c.label_smoothing) non_negative("--label-smoothing", *c.label_smoothing);
  if (c.warmup) non_negative("--warmup", double(*c.warmup));
  if (c.cutout) non_negative("--cutout", double(*c.cutout));
  if (c.ema_every) non_negative("--ema-every", double(*c.ema_every));
  positive("--accumulate", double(c.accumulate));
  positive("--log-every", double(c.log_every));
  positive("--eval-batch", double(c.eval_batch));
  positive("--keep-last", c.keep_last);
  if (!c.data_mode.empty() && c.data_mode != "shards" && c.data_mode != "sampler")
    throw InvalidArgument("ddp-train: --data must be shards or sampler, got '" + c.data_mode + "'");
  if (c.checkpoint_every < 0 || c.stop_after < 0 || c.limit_train < 0 || c.limit_test < 0)
    throw InvalidArgument("ddp-train: --checkpoint-every, --stop-after, --limit-train and --limit-test must be >= 0");
  return c;
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
          {"momentum", num(c.momentum)},
          {"weight_decay", num(c.weight_decay)},
          {"label_smoothing", num(c.label_smoothing)},
          {"schedule", c.schedule},
          {"warmup", count(c.warmup)},
          {"accumulate", std::to_string(c.accumulate)},
          {"data_dir", c.data_dir},
          {"data_mode", c.data_mode},
          {"out_dir", c.out_dir},
          {"seed", std::to_string(c.seed)},
          {"backend", c.backend},
          {"cutout", count(c.cutout)},
          {"ema_every", count(c.ema_every)},
          {"precision", c.precision},
          {"limit_train", std::to_string(c.limit_train)},
          {"limit_test", std::to_string(c.limit_test)}};
}

}  // namespace ddp::train
