// ddp-bench subcommands.
#pragma once
#include <ATen/core/Tensor.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::bench {

// Each adds its subcommand to ddp-bench's command line; when it is chosen,
// parsing sets `run` to the measurement with the parsed options.
void add_collectives_command(CLI::App& app, std::function<int()>& run);  // bandwidth per collective
void add_ddp_command(CLI::App& app, std::function<int()>& run);          // training-step time under DDP
void add_memory_command(CLI::App& app, std::function<int()>& run);       // memory per rank: DDP, ZeRO-1/2/3
void add_decode_command(CLI::App& app, std::function<int()>& run);       // images decoded per second, one thread
void add_compute_command(CLI::App& app, std::function<int()>& run);      // GFLOP/s per model against the GEMM peak
void add_save_command(CLI::App& app, std::function<int()>& run);         // ddp's torch.save writer vs pickle_save

// A CLI11 check: `accept` throws for a value it refuses; its message is CLI11's.
template <typename Accept>
std::function<std::string(const std::string&)> refused_by(Accept accept) {
  return [accept](const std::string& value) {
    try {
      accept(value);
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
}

// Writes `doc` as indented JSON to `path`; throws naming the file.
void write_json(const std::string& path, const nlohmann::ordered_json& doc);
// The "# cpu: ..." and "# malloc: ..." lines each table opens with (the allocator as main set it).
void print_machine_lines();
void set_malloc_note(std::string note);
// Busy for `ms` milliseconds, touching no memory: --gap-ms's stand-in for a step's computation.
void spin_ms(double ms);

// Plain MPI calls on MPI_COMM_WORLD, the peer our mpi backend is measured
// against. Returns microseconds per call (max over ranks), or -1 when MPI is
// not built in.
double raw_mpi_time_us(const std::string& op, void* in, void* out, long long count, int iters, double gap_ms);

// c10d's ProcessGroupGloo used directly, the engine under PyTorch's gloo: the
// peer our gloo backend is measured against in the same processes. Only
// all_reduce, all_gather and broadcast (c10d 1.13 has no gloo reduce_scatter).
struct RawGloo;
std::shared_ptr<RawGloo> make_raw_gloo(const StorePtr& store, int rank, int size);
double raw_gloo_time_us(RawGloo& raw, const std::string& op, at::Tensor& in, at::Tensor& out, long long count,
                        int iters);

}  // namespace ddp::bench
