// ddp-bench: performance measurements of ddp.
//
//   ddprun --nproc-per-node 2 --standalone build/bin/ddp-bench collectives --backend gloo
//
// Subcommands: collectives (bandwidth of each collective per message size),
// ddp (training-step time under DDP), memory (bytes per rank under DDP and
// ZeRO-1/2/3), decode (images decoded per second on one thread), compute (each model's
// GFLOP/s against this CPU's GEMM peak).
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "bench.h"
#include "ddp/dist/error_file.h"
#include "ddp/train/allocator.h"
#include "ddp/train/machine.h"

namespace ddp::bench {
namespace {
std::string g_malloc_note = "malloc: glibc's defaults";
}  // namespace

void set_malloc_note(std::string note) { g_malloc_note = std::move(note); }

void print_machine_lines() {
  std::printf("# cpu: %s\n# %s\n", train::describe(train::cpu_info()).c_str(), g_malloc_note.c_str());
}

}  // namespace ddp::bench

int main(int argc, char** argv) {
  // As ddp-train does: the benchmarks measure what training gets.
  ddp::bench::set_malloc_note(ddp::train::keep_freed_memory().description);
  CLI::App app("performance measurements of ddp (run under ddprun)", "ddp-bench");
  app.require_subcommand(1);
  std::function<int()> run;
  ddp::bench::add_collectives_command(app, run);
  ddp::bench::add_ddp_command(app, run);
  ddp::bench::add_memory_command(app, run);
#ifdef DDP_WITH_IMAGE_FOLDER  // an optional part (src/CMakeLists.txt)
  ddp::bench::add_decode_command(app, run);
#endif
  ddp::bench::add_compute_command(app, run);
  ddp::bench::add_save_command(app, run);
  CLI11_PARSE(app, argc, argv);
  try {
    return run();
  } catch (const std::exception& e) {
    ddp::record_error(e, 1);  // for ddprun's summary (TORCHELASTIC_ERROR_FILE)
    std::fprintf(stderr, "ddp-bench %s: %s\n", app.get_subcommands().front()->get_name().c_str(), e.what());
    return 1;
  }
}
