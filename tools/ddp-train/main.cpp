// ddp-train: the training recipes, single-process or under ddprun.
//
//   build/bin/ddp-train fashion-mnist                                  # one process
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/ddp-train fashion-mnist
//   build/bin/ddp-train --help                                         # recipes and flags
//
// Prints the job, a progress line per epoch with loss, accuracy and
// throughput, and where the logs and the checkpoint are.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "ddp/dist/init.h"
#include "ddp/train/trainer.h"

namespace {
// Messages already naming the tool are printed once.
const char* strip(const char* what) {
  const char prefix[] = "ddp-train: ";
  return std::strncmp(what, prefix, sizeof(prefix) - 1) == 0 ? what + sizeof(prefix) - 1 : what;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    auto cfg = ddp::train::parse_args(argc, argv);
    if (cfg.recipe == "help") {
      std::cout << ddp::train::usage();
      return 0;
    }
    ddp::train::run(cfg);
    ddp::destroy_process_group();
    return 0;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ddp-train: rank %d: %s\n", ddp::get_rank(), strip(e.what()));
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-train: rank %d: %s\n", ddp::get_rank(), strip(e.what()));
    return 1;
  }
}
