// Which backend init_process_group would pick, and why (for a program's first log line).
#pragma once
#include <string>

#include "ddp/dist/init.h"

namespace ddp {

struct BackendChoice {
  std::string backend;  // gloo | mpi | nccl | local
  // "InitOptions::backend \"gloo\"", "auto: one node, OpenMPI 4.1.4" (ddprun's, via
  // DDP_BACKEND_REASON), "DDP_BACKEND=gloo", "auto: started by mpirun", ...
  std::string reason;
  // Where a task that srun started found its rank, world and store: "RANK from SLURM_PROCID, ..."; "" otherwise.
  std::string placement;
};

// The rule of InitOptions::backend = "auto" applied to opts and the environment
// (docs/backends.md, "Choosing"). Throws ddp::InvalidArgument as init would.
BackendChoice choose_backend(const InitOptions& opts = {});

}  // namespace ddp
