// ddp::spawn: the C++ torch.multiprocessing.spawn. Runs fn(rank, world) in
// `nprocs` local processes without a launcher:
//
//   int main(int argc, char** argv) {
//     return ddp::run_main("train", argc, argv, [](int, char**) {
//       ddp::spawn(3, [](int rank, int world) {
//         ddp::init_process_group();  // env://, as under ddprun
//         ...
//       });
//       return 0;
//     });
//   }
//
// The parent re-executes this program (/proc/self/exe, same argv) once per
// rank, with ddprun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_ERROR_FILE...) plus DDP_SPAWN_CHILD. A fresh
// process, not a bare fork, so LibTorch's thread pools start clean.
// Everything main() does before spawn() runs in every rank too (as Python
// re-imports the main module): call spawn() early. In a rank, spawn() calls
// fn(rank, world) and ends the process: exit code 0, or 1 when fn threw (the
// message goes to stderr and the launcher's error file).
//
// In the parent, as ddprun: each output line gets "[rank N] ", the first
// failing rank stops the others (SIGTERM, SIGKILL after the grace period),
// a failure summary names the root cause, and the ranks die with the parent
// (PR_SET_PDEATHSIG). Link ddp::spawn. See docs/launcher.md, "ddp::spawn".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/errors.h"

namespace ddp {

struct SpawnOptions {
  // "gloo" or "auto" (DDP_BACKEND as ddprun --backend; auto: the ranks' default).
  // "mpi" is refused: MPI ranks need mpirun (use ddprun --backend mpi).
  std::string backend = "auto";
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: a free port on 127.0.0.1
  double timeout_s = 0;       // DDP_TIMEOUT for the ranks; 0: inherited (else their default)
  double kill_grace_s = 5;    // SIGTERM -> SIGKILL when the others are stopped
  bool prefix_output = true;  // "[rank N] " before each line of the ranks' output
};

// A failed spawn: the first failed rank (-1: none, e.g. the parent was
// interrupted), its ddprun-like exit code and the failure summary; what() is
// "ddp::spawn: rank 1 failed (exit code 1)" followed by the summary lines.
class SpawnError : public Error {
 public:
  SpawnError(int rank, int exit_code, std::vector<std::string> summary);
  int rank() const { return rank_; }
  int exit_code() const { return exit_code_; }
  const std::vector<std::string>& summary() const { return summary_; }

 private:
  int rank_;
  int exit_code_;
  std::vector<std::string> summary_;
};

// Ranks started by start_processes() (mp.spawn(..., join=False)).
class SpawnContext {
 public:
  class Impl;
  explicit SpawnContext(std::unique_ptr<Impl> impl);
  SpawnContext(SpawnContext&&) noexcept;
  SpawnContext& operator=(SpawnContext&&) noexcept;
  ~SpawnContext();  // waits for the ranks (without throwing) when join() was not called
  // Waits for every rank; throws SpawnError when one failed. Once only
  // (later calls throw ddp::Error).
  void join();

 private:
  std::unique_ptr<Impl> impl_;
};

// mp.spawn(fn, nprocs=N, join=True): starts the ranks and waits for them;
// returns 0 when every rank exited with 0, throws SpawnError otherwise.
// Bad arguments (nprocs < 1, an empty fn, backend "mpi", a port out of range)
// throw ddp::InvalidArgument; a call from inside fn (nested) or while another
// spawn runs throws ddp::Error. In a rank it never returns.
// A program that calls spawn() more than once: a rank of the k-th call skips
// the earlier calls (they return 0 at once without starting anything).
int spawn(int nprocs, const std::function<void(int rank, int world)>& fn, const SpawnOptions& opts = {});

// mp.spawn(..., join=False): starts the ranks and returns; their supervision
// (output, fail-fast) runs on a thread of this process until join().
SpawnContext start_processes(int nprocs, const std::function<void(int rank, int world)>& fn,
                             const SpawnOptions& opts = {});

// True in a process started by spawn() (DDP_SPAWN_CHILD is set).
bool is_spawned_child();

}  // namespace ddp
