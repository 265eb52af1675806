// ddp-train: the training recipes, single-process or under ddprun.
//
//   build/bin/ddp-train fashion-mnist                                  # one process
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/ddp-train fashion-mnist
//   build/bin/ddp-train --help                                         # recipes and flags
//   build/bin/ddp-train cifar10-resnet9 --print-config > my.toml       # every setting, as a file
//   build/bin/ddp-train --config my.toml --epochs 2                    # the file, then the flags
//   build/bin/ddp-train report runs/fashion-mnist                      # rebuild its report.html
//   build/bin/ddp-train report runs/w1 runs/w2 -o compare.html         # two runs side by side
//
// Prints the job, a progress line per epoch with loss, accuracy and
// throughput, and where the logs and the checkpoint are.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "ddp/dist/error_file.h"
#include "ddp/dist/init.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/tensor_memory.h"
#include "ddp/train/allocator.h"
#include "ddp/train/recipe.h"
#include "ddp/train/trainer.h"
#include "report_command.h"

namespace {
// Messages already naming the tool are printed once.
const char* strip(const char* what) {
  const char prefix[] = "ddp-train: ";
  return std::strncmp(what, prefix, sizeof(prefix) - 1) == 0 ? what + sizeof(prefix) - 1 : what;
}
// This process's rank: the group's, else the launcher's (RANK, or mpirun's OMPI_COMM_WORLD_RANK: before or
// without a group), else 0.
std::string rank_label() { return std::to_string(std::max(0, ddp::error_rank())); }
// The world the recipe's defaults are resolved for: the launcher's, else 1.
int launcher_world_size() {
  return std::max(1, ddp::launch_env::first_valid_count({&ddp::launch_env::kWorldSize}).value_or(1));
}
// `ddp-train report|sample ...`: no ranks, so their errors are "ddp-train <name>: <what>" (exit 2 for bad
// arguments).
int subcommand(int (*run)(int, char**), const char* name, int argc, char** argv) {
  const std::string tool = std::string("ddp-train ") + name + ": ";
  auto text = [&](const char* what) {
    for (const std::string& prefix : {tool, std::string(name) + ": "})
      if (std::strncmp(what, prefix.c_str(), prefix.size()) == 0) return what + prefix.size();
    return what;
  };
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s%s\n", tool.c_str(), text(e.what()));
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", tool.c_str(), text(e.what()));
    return 1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::strcmp(argv[1], "report") == 0)
      return subcommand(ddp_train_tool::report_main, "report", argc - 1, argv + 1);
    if (argc >= 2 && std::strcmp(argv[1], "sample") == 0)
      return subcommand(ddp_train_tool::sample_main, "sample", argc - 1, argv + 1);
    ddp::train::keep_freed_memory();  // before the first tensors; the Trainer reports it
    ddp::count_tensor_memory();       // each epoch's peak tensor memory in its line and metrics.jsonl
    auto command = ddp::train::parse_command_line(argc, argv);
    auto& cfg = command.config;
    using Action = ddp::train::CommandLine::Action;
    if (command.action == Action::kHelp) {
      std::cout << ddp::train::usage();
      return 0;
    }
    if (command.action == Action::kPrintConfig) {
      ddp::train::fill_recipe_defaults(cfg, launcher_world_size());
      std::cout << ddp::train::to_config_file(cfg);
      return 0;
    }
    const auto summary = ddp::train::run(cfg);
    ddp::destroy_process_group();
    return summary.preempted ? ddp::train::kExitPreempted : 0;
  } catch (const std::invalid_argument& e) {
    ddp::record_error(e, 2);  // for ddprun's summary (TORCHELASTIC_ERROR_FILE)
    std::fprintf(stderr, "ddp-train: rank %s: %s\n", rank_label().c_str(), strip(e.what()));
    return 2;
  } catch (const std::exception& e) {
    ddp::record_error(e, 1);
    std::fprintf(stderr, "ddp-train: rank %s: %s\n", rank_label().c_str(), strip(e.what()));
    return 1;
  }
}
