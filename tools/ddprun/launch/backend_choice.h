// --backend auto: which backend ddprun launches with, and why (see docs/launcher.md).
#pragma once

#include <string>

#include "cli/options.h"

namespace ddprun {

// What the rule looks at, found by probe_mpi() (tests inject their own).
struct MpiProbe {
  bool built = false;         // this build has the mpi backend (DDP_HAVE_MPI)
  bool mpirun_found = false;  // mpirun on PATH
  std::string mpirun_path;
  std::string version;  // "OpenMPI 4.1.4", or empty when unknown
  bool program_links_ddp =
      false;              // an ELF program needing a libddp_* library (each links libddp_dist, the mpi backend's home)
  std::string inherited;  // DDP_BACKEND in ddprun's environment ("" when unset)
  bool nccl_built = false;  // this build has the nccl backend (DDP_HAVE_NCCL)
  int gpus = 0;             // NVIDIA GPUs on this node (/dev/nvidiaN), 0 when CUDA_VISIBLE_DEVICES hides them
};

struct LaunchBackend {
  Backend backend = Backend::kGloo;
  Backend on_gpu = Backend::kAuto;  // auto's gloo launch: a rank whose device is a GPU takes nccl (Auto: no such rule)
  std::string reason;               // "auto: one node, OpenMPI 4.1.4"; "--backend gloo" when given
  std::string error;                // non-empty: the choice cannot run (one line, for report())
};

// The rule. --backend gloo|mpi|nccl is kept. auto: an inherited DDP_BACKEND=gloo|mpi is
// kept; else gloo for --recovery inplace, several nodes, the c10d rendezvous, a program that is not a
// ddp binary, a node with GPUs and an nccl build, or no usable OpenMPI; else mpi. Auto's
// gloo launches say that a rank on a GPU takes nccl (on_gpu, exported as DDP_BACKEND_ON_GPU).
LaunchBackend choose_backend(const Options& options, const MpiProbe& probe);

// Looks at PATH (mpirun and its --version), the program's ELF dependencies
// and DDP_BACKEND. Runs mpirun --version only when the rule may pick mpi.
MpiProbe probe_mpi(const Options& options, const std::string& program_path);

// Whether the ELF file at path lists a DT_NEEDED entry starting with prefix.
bool elf_needs(const std::string& path, const std::string& prefix);

}  // namespace ddprun
