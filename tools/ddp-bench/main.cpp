// ddp-bench: performance measurements of ddp.
//
//   ddprun --nproc-per-node 2 --standalone build/bin/ddp-bench collectives --backend gloo
//
// Subcommands: collectives (bandwidth of each collective per message size),
// ddp (training-step time under DDP).
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::printf("usage: ddp-bench collectives|ddp [options]   (run under ddprun; --help after it for options)\n");
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "collectives") return ddp::bench::collectives_main(args);
    if (cmd == "ddp") return ddp::bench::ddp_main(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-bench %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "ddp-bench: unknown subcommand '%s'; valid: collectives, ddp\n", cmd.c_str());
  return 2;
}
