// ddp-train's settings: the command line, --config files, --print-config, the
// checks and describe(), all driven by one table (src/train/config/settings.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "ddp/errors.h"
#include "ddp/train/config.h"
#include "ddp/train/recipe.h"
#include "train/config/settings.h"
#include "train/recipes/common.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

CommandLine parse_line(std::vector<std::string> args) {
  std::vector<const char*> argv = {"ddp-train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(int(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse_line(std::move(args));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

// Settings left out stay unset (the recipe decides); a value given is checked,
// -1 included (it once meant "unset" and slipped through).
TEST(TrainConfig, UnsetIsNotANumber) {
  std::vector<const char*> argv = {"ddp-train", "mlp", "--epochs", "2"};
  TrainConfig c = parse_args(int(argv.size()), argv.data());
  EXPECT_EQ(c.epochs, std::optional<int64_t>(2));
  EXPECT_FALSE(c.lr.has_value());
  EXPECT_FALSE(c.batch_size.has_value());
  for (auto bad : {std::vector<const char*>{"ddp-train", "mlp", "--lr", "-1"},
                   std::vector<const char*>{"ddp-train", "mlp", "--batch-size=-1"},
                   std::vector<const char*>{"ddp-train", "mlp", "--weight-decay", "-0.5"},
                   std::vector<const char*>{"ddp-train", "mlp", "--eval-every", "-2"}}) {
    try {
      parse_args(int(bad.size()), bad.data());
      ADD_FAILURE() << bad[2] << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("must be"), std::string::npos) << e.what();
    }
  }
}

// A --config file sets what it names; the command line wins over it.
TEST(TrainConfig, ConfigFileThenFlags) {
  test::TempDir tmp;
  test::write_file(tmp / "job.toml",
                   "recipe = \"fashion-mnist\"\nepochs = 7\nlr = 0.025\n"
                   "schedule = \"piecewise:0:0,0.25:1,1:0.1\"\nprogress = false\nresume = true\n");
  CommandLine cl = parse_line({"--config", tmp / "job.toml", "--epochs", "2"});
  EXPECT_EQ(cl.action, CommandLine::Action::kTrain);
  EXPECT_EQ(cl.config.recipe, "fashion-mnist");
  EXPECT_EQ(cl.config.epochs, std::optional<int64_t>(2));
  EXPECT_EQ(cl.config.lr, std::optional<double>(0.025));
  EXPECT_EQ(cl.config.schedule, "piecewise:0:0,0.25:1,1:0.1");
  EXPECT_FALSE(cl.config.progress);
  EXPECT_TRUE(cl.config.resume);
  EXPECT_FALSE(cl.config.batch_size.has_value());  // not in the file: the recipe decides
  // The file's values are checked as flags are.
  test::write_file(tmp / "bad.toml", "recipe = \"mlp\"\nlr = -1\n");
  EXPECT_NE(error_of({"--config", tmp / "bad.toml"}).find("--lr must be positive"), std::string::npos);
  test::write_file(tmp / "typo.toml", "recipe = \"mlp\"\nepoch = 3\n");
  EXPECT_NE(error_of({"--config", tmp / "typo.toml"}).find("epoch"), std::string::npos);
  EXPECT_NE(error_of({"--config", tmp / "missing.toml"}).find("missing.toml"), std::string::npos);
}

// --print-config writes every setting resolved; --config reads it back to the same settings.
TEST(TrainConfig, PrintedConfigReadsBack) {
  test::TempDir tmp;
  for (std::string recipe : recipe_names()) {
    CommandLine cl = parse_line({recipe, "--print-config", "--seed", "5", "--no-progress"});
    ASSERT_EQ(cl.action, CommandLine::Action::kPrintConfig);
    fill_recipe_defaults(cl.config, 2);
    const std::string text = to_config_file(cl.config);
    EXPECT_EQ(text.find("recipe's default"), std::string::npos) << "unresolved setting:\n" << text;
    test::write_file(tmp / "printed.toml", text);
    CommandLine back = parse_line({"--config", tmp / "printed.toml"});
    EXPECT_EQ(describe(back.config), describe(cl.config)) << text;
    EXPECT_EQ(to_config_file(back.config), text);
    EXPECT_EQ(back.config.seed, 5u);
    EXPECT_FALSE(back.config.progress);
  }
  // The recipe's defaults depend on the world: resnet9 keeps a global batch of 512.
  CommandLine r9 = parse_line({"cifar10-resnet9"});
  fill_recipe_defaults(r9.config, 4);
  EXPECT_EQ(r9.config.batch_size, std::optional<int64_t>(128));
  // fashion-mnist-fast: a global batch of 128, evaluated every eighth of an epoch (60000 / 8 / 128 steps).
  CommandLine fast = parse_line({"fashion-mnist-fast"});
  fill_recipe_defaults(fast.config, 4);
  EXPECT_EQ(fast.config.batch_size, std::optional<int64_t>(32));
  EXPECT_EQ(fast.config.eval_every, std::optional<int64_t>(58));
  EXPECT_EQ(r9.config.eval_every, std::optional<int64_t>(0));
}

TEST(TrainConfig, BadCommandLines) {
  EXPECT_NE(error_of({}).find("missing the recipe"), std::string::npos);
  EXPECT_NE(error_of({"resnet"}).find("unknown recipe 'resnet'"), std::string::npos);
  EXPECT_NE(error_of({"mlp", "--epochs", "3x"}).find("--epochs expects an integer, got '3x'"), std::string::npos);
  EXPECT_NE(error_of({"mlp", "--epocs", "3"}).find("--epocs"), std::string::npos);
  EXPECT_NE(error_of({"mlp", "--epochs"}).find("--epochs"), std::string::npos);
  EXPECT_NE(error_of({"mlp", "--precision", "fp16"}).find("unknown precision 'fp16'; valid: fp32, bf16, auto"),
            std::string::npos);
  EXPECT_EQ(parse_line({"--help"}).action, CommandLine::Action::kHelp);
  EXPECT_EQ(parse_line({"mlp", "--epochs=3", "--epochs", "4"}).config.epochs, std::optional<int64_t>(4));
  for (const char* flag : {"--config", "--print-config", "--epochs", "--batch-size", "--schedule", "--resume",
                           "--no-progress", "--backend", "fashion-mnist"})
    EXPECT_NE(usage().find(flag), std::string::npos) << flag;
}

// --device: checked as read; whether the GPU is there is the Trainer's (TrainerRanks.ADeviceThatIsNotThere...).
TEST(TrainConfig, Device) {
  EXPECT_EQ(parse_line({"mlp"}).config.device, "auto");
  EXPECT_EQ(parse_line({"mlp", "--device", "cuda:3"}).config.device, "cuda:3");
  EXPECT_NE(error_of({"mlp", "--device", "gpu"}).find("device 'gpu': expected auto, cpu, cuda or cuda:N"),
            std::string::npos)
      << error_of({"mlp", "--device", "gpu"});
  EXPECT_NE(error_of({"mlp", "--device", "cuda:x"}).find("expected cuda:N"), std::string::npos);
}

// --timeout: the rendezvous/collective timeout (else DDP_TIMEOUT, which ddprun --timeout sets).
TEST(TrainConfig, Timeout) {
  EXPECT_FALSE(parse_line({"mlp"}).config.timeout.has_value());
  EXPECT_EQ(parse_line({"mlp", "--timeout", "12.5"}).config.timeout, std::optional<double>(12.5));
  EXPECT_NE(error_of({"mlp", "--timeout", "0"}).find("ddp-train: --timeout must be positive"), std::string::npos);
  EXPECT_NE(error_of({"mlp", "--timeout", "soon"}).find("--timeout expects a finite number, got 'soon'"),
            std::string::npos);
  EXPECT_NE(usage().find("--timeout"), std::string::npos);
  EXPECT_NE(to_config_file(parse_line({"mlp", "--timeout", "90"}).config).find("\ntimeout = 90\n"), std::string::npos);
}

// Every setting of the table is a flag in --help, a key in --print-config, and
// survives the round trip through a file with a value other than its default.
TEST(Settings, EverySettingIsAFlagAKeyAndReadsBack) {
  test::TempDir tmp;
  std::vector<std::string> args = {"mlp"};
  std::set<std::string> names;
  for (const auto& s : detail::settings()) {
    EXPECT_TRUE(names.insert(s.name).second) << "twice: " << s.name;
    if (s.positional) continue;
    EXPECT_NE(usage().find("--" + s.name), std::string::npos) << s.name;
  }
  // A value for each, none the default.
  const std::vector<std::string> values = {"--epochs=3",
                                           "--batch-size=7",
                                           "--lr=0.0123456789",
                                           "--optimizer=adamw",
                                           "--momentum=0.5",
                                           "--betas=0.8,0.98",
                                           "--clip-grad=0.5",
                                           "--eps=1e-6",
                                           "--weight-decay=0.25",
                                           "--label-smoothing=0.1",
                                           "--schedule=cosine:0.5",
                                           "--warmup=4",
                                           "--accumulate=2",
                                           "--cutout=3",
                                           "--ema-every=5",
                                           "--precision=bf16",
                                           "--data-dir=/data/it's \"here\"",
                                           "--data=shards",
                                           "--image-size=96",
                                           "--workers=3",
                                           "--limit-train=100",
                                           "--limit-test=50",
                                           "--eval-batch=64",
                                           "--eval-every=9",
                                           "--out-dir=/tmp/x",
                                           "--seed=42",
                                           "--resume",
                                           "--checkpoint-every=10",
                                           "--keep-last=2",
                                           "--no-async-save",
                                           "--stop-signal=USR2",
                                           "--requeue",
                                           "--stop-after=1",
                                           "--log-every=3",
                                           "--backend=mpi",
                                           "--device=cuda:1",
                                           "--timeline=t.json",
                                           "--timeout=30.5",
                                           "--strategy=zero1",
                                           "--hsdp-shard-size=2",
                                           "--comm-hook=powersgd:rank=2",
                                           "--sync-bn",
                                           "--no-progress",
                                           "--no-nan-check",
                                           "--nan-check-at=next-step",
                                           "--deterministic"};
  args.insert(args.end(), values.begin(), values.end());
  std::vector<const char*> argv = {"ddp-train"};
  for (const auto& a : args) argv.push_back(a.c_str());
  const TrainConfig given = parse_args(int(argv.size()), argv.data());
  const TrainConfig defaults;
  for (const auto& s : detail::settings()) {
    if (s.positional) continue;
    EXPECT_NE(detail::value_text(s, given), detail::value_text(s, defaults)) << s.name << " is not set by the test";
  }
  const std::string text = to_config_file(given);
  EXPECT_EQ(text.find("# "), text.find("# ddp-train settings")) << "a setting left unset:\n" << text;
  EXPECT_EQ(text.rfind("# "), 0u) << text;
  test::write_file(tmp / "all.toml", text);
  const TrainConfig back = parse_line({"--config", tmp / "all.toml"}).config;
  for (const auto& s : detail::settings())
    EXPECT_EQ(detail::value_text(s, back), detail::value_text(s, given)) << s.name << " in\n" << text;
  EXPECT_EQ(back.data_dir, "/data/it's \"here\"");
  EXPECT_EQ(back.lr, std::optional<double>(0.0123456789));
  EXPECT_EQ(back.betas, std::make_pair(0.8, 0.98));
  EXPECT_NE(text.find("\nbetas = [0.8, 0.98]\n"), std::string::npos) << text;
}

// describe() records the job's settings (checkpoints, the resume warning), not how one run goes.
TEST(Settings, DescribeKeepsTheJobNotTheRun) {
  TrainConfig c;
  c.recipe = "mlp";
  c.batch_size = 32;
  std::map<std::string, std::string> d;
  for (const auto& [k, v] : describe(c)) d[k] = v;
  EXPECT_EQ(d.at("recipe"), "mlp");
  EXPECT_EQ(d.at("batch_size"), "32");
  EXPECT_EQ(d.at("lr"), "(the recipe's default)");
  EXPECT_EQ(d.at("timeout"), "(DDP_TIMEOUT, else 600)");
  EXPECT_EQ(d.at("data_dir"), "(the recipe's default)");
  for (const char* run_only : {"resume", "progress", "stop_after", "keep_last", "log_every"})
    EXPECT_EQ(d.count(run_only), 0u) << run_only;
}

// A file's mistakes name the file, the line and the key, with the fix.
TEST(Settings, ConfigFileErrorsNameFileLineAndKey) {
  test::TempDir tmp;
  auto error_in = [&](const std::string& body) {
    test::write_file(tmp / "job.toml", body);
    return error_of({"--config", tmp / "job.toml"});
  };
  const std::string file = tmp / "job.toml";
  EXPECT_EQ(error_in("recipe = \"mlp\"\nepoch = 3\n"),
            "ddp-train: --config " + file +
                ":2: unknown setting 'epoch' (did you mean 'epochs'?); keys are "
                "ddp-train's flags without -- (ddp-train --help)");
  EXPECT_EQ(error_in("recipe = \"mlp\"\n\nepochs = \"3\"\n"),
            "ddp-train: --config " + file + ":3: epochs expects an integer, got '3' (a TOML string)");
  EXPECT_EQ(error_in("recipe = \"mlp\"\nepochs = 2.5\n"),
            "ddp-train: --config " + file + ":2: epochs expects an integer, got 2.5 (a TOML floating-point)");
  EXPECT_EQ(error_in("recipe = \"mlp\"\nlr = inf\n"),
            "ddp-train: --config " + file + ":2: lr expects a finite number, got inf (a TOML floating-point)");
  EXPECT_EQ(error_in("recipe = \"mlp\"\nlr = -1\n"),
            "ddp-train: --config " + file + ":2: --lr must be positive, got -1");
  EXPECT_EQ(error_in("recipe = \"mlp\"\nseed = -1\n"), "ddp-train: --config " + file + ":2: seed must be >= 0, got -1");
  EXPECT_EQ(error_in("recipe = \"mlp\"\nbetas = [0.9]\n").find("betas expects two numbers, [B1, B2]"),
            ("ddp-train: --config " + file + ":2: ").size());
  EXPECT_EQ(error_in("recipe = \"mlp\"\noptimizer = \"lamb\"\n"),
            "ddp-train: --config " + file + ":2: unknown optimizer 'lamb'; valid: sgd, adam, adamw");
  EXPECT_NE(error_in("recipe = = 1\n").find(file + ":1:10: not valid TOML: "), std::string::npos)
      << error_in("recipe = = 1\n");
  // Numbers: an integer is a number; the old "B1,B2" text of betas still reads.
  test::write_file(tmp / "ok.toml", "recipe = \"mlp\"\nlr = 1\nbetas = \"0.5,0.75\"\n");
  const TrainConfig ok = parse_line({"--config", tmp / "ok.toml"}).config;
  EXPECT_EQ(ok.lr, std::optional<double>(1.0));
  EXPECT_EQ(ok.betas, std::make_pair(0.5, 0.75));
}

TEST(Settings, FlagsAreCheckedByTheTable) {
  EXPECT_EQ(error_of({"mlp", "--seed", "-1"}), "ddp-train: --seed must be >= 0, got -1");
  EXPECT_EQ(error_of({"mlp", "--epochs", "0"}), "ddp-train: --epochs must be positive, got 0");
  EXPECT_EQ(error_of({"mlp", "--epochs", "0x10"}), "ddp-train: --epochs expects an integer, got '0x10'");
  EXPECT_EQ(parse_line({"mlp", "--epochs", "010"}).config.epochs, std::optional<int64_t>(10));  // decimal, not octal
  EXPECT_EQ(parse_line({"mlp", "--epochs", "+3"}).config.epochs, std::optional<int64_t>(3));
  EXPECT_EQ(error_of({"mlp", "--lr", "inf"}), "ddp-train: --lr expects a finite number, got 'inf'");
  EXPECT_EQ(error_of({"mlp", "--betas", "0.9,1"}), "ddp-train: --betas must each be in [0, 1), got 1");
  EXPECT_EQ(error_of({"mlp", "--betas", "0.9"}),
            "ddp-train: --betas expects two numbers as B1,B2 (e.g. 0.9,0.999), got '0.9'");
  EXPECT_EQ(error_of({"mlp", "--data", "disk"}), "ddp-train: unknown data 'disk'; valid: shards, sampler");
  EXPECT_NE(error_of({"mlp", "--schedule", "cosine:x"}).find("ddp-train: --schedule: learning-rate schedule"),
            std::string::npos);
  EXPECT_NE(error_of({"mlp", "--comm-hook", "zip"}).find("ddp-train: --comm-hook: "), std::string::npos);
  EXPECT_FALSE(parse_line({"mlp", "--no-sync-bn"}).config.sync_bn);
  EXPECT_TRUE(parse_line({"mlp", "--sync-bn"}).config.sync_bn);
  // The Trainer checks the same table with the same words.
  TrainConfig c;
  c.recipe = "spirals";  // a program's own job: no registered recipe needed
  c.accumulate = 0;
  try {
    check_settings(c);
    ADD_FAILURE() << "accumulate 0 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "ddp-train: --accumulate must be positive, got 0");
  }
}

// Recipes register themselves; ddp-train and its --help list the registry.
TEST(Recipes, RegistryListsEveryRecipeAndRefusesDuplicates) {
  std::vector<std::string> names;
  for (const auto& r : registered_recipes()) {
    names.push_back(r.name);
    EXPECT_FALSE(r.summary.empty()) << r.name;
    EXPECT_NE(usage().find(r.name), std::string::npos) << r.name;
    EXPECT_NE(usage().find("  " + r.name + " "), std::string::npos) << r.name << ": no line in --help's Recipes";
    EXPECT_NE(usage().find(r.summary), std::string::npos) << r.name << ": its summary is not in --help";
    for (const char* words : {"seed 00", "course"})  // the source material's words mean nothing to a user
      EXPECT_EQ(r.summary.find(words), std::string::npos) << r.name << ": '" << r.summary << "'";
  }
  EXPECT_EQ(names, recipe_names());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* expected : {"mlp", "fashion-mnist", "fashion-mnist-fast", "cifar10-resnet9", "cifar10-resnet18",
                               "cifar10-airbench", "imagefolder-resnet18", "imagefolder-resnet50"})
    EXPECT_NE(find_recipe(expected), nullptr) << expected;
  RecipeInfo twice = *find_recipe("mlp");
  EXPECT_THROW(register_recipe(twice), InvalidArgument);
  EXPECT_THROW(register_recipe({"", "x", twice.defaults, twice.build}), InvalidArgument);
  EXPECT_THROW(register_recipe({"half", "x", twice.defaults, nullptr}), InvalidArgument);
}

// Data folders: --data-dir, else $DDP_DATA_DIR/<set>, else ~/.cache/ddp/<set> (or a system copy when given).
TEST(Recipes, DataFoldersAndTheErrorSayingHowToGetTheData) {
  test::TempDir tmp;
  const std::string old_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  const char* old_root = std::getenv("DDP_DATA_DIR");
  const std::string saved_root = old_root ? old_root : "";
  ::setenv("HOME", (tmp / "home").c_str(), 1);
  ::unsetenv("DDP_DATA_DIR");
  EXPECT_EQ(detail::default_data_dir("cifar10"), tmp / "home/.cache/ddp/cifar10");  // missing: where it should go
  std::filesystem::create_directories(tmp / "system");
  EXPECT_EQ(detail::default_data_dir("fashion-mnist", tmp / "system"), tmp / "system");
  std::filesystem::create_directories(tmp / "home/.cache/ddp/fashion-mnist");
  EXPECT_EQ(detail::default_data_dir("fashion-mnist", tmp / "system"), tmp / "home/.cache/ddp/fashion-mnist");
  ::setenv("DDP_DATA_DIR", (tmp / "data").c_str(), 1);
  EXPECT_EQ(detail::default_data_dir("fashion-mnist", tmp / "system"), tmp / "data/fashion-mnist");
  try {
    detail::require_data_dir(tmp / "data/cifar10", "cifar10", "download it.");
    ADD_FAILURE() << "a missing folder accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), "ddp-train: the cifar10 data set is not at " + (tmp / "data/cifar10") +
                                         " (no such folder; ddp-train looks in --data-dir DIR, else "
                                         "$DDP_DATA_DIR/cifar10, else ~/.cache/ddp/cifar10). To get it: download it.");
  }
  EXPECT_NO_THROW(detail::require_data_dir(tmp / "system", "cifar10", "-"));
  ::setenv("HOME", old_home.c_str(), 1);
  if (old_root)
    ::setenv("DDP_DATA_DIR", saved_root.c_str(), 1);
  else
    ::unsetenv("DDP_DATA_DIR");
}

}  // namespace
}  // namespace ddp::train
