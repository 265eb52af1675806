// Turns InitOptions plus the environment into a concrete rendezvous plan:
// which backend, which rank and world size, and how to meet (env://, tcp://,
// file://, a given store, or nothing for a world of one).
#pragma once
#include <functional>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "ddp/dist/init.h"
#include "ddp/dist/launch_env.h"

namespace ddp::detail {

using launch_env::EnvFn;

struct Rendezvous {
  std::string backend;         // gloo | mpi | nccl | local
  std::string backend_reason;  // why: "InitOptions::backend", "auto: started by mpirun", ...
  std::string placement;       // what srun's variables gave ("RANK from SLURM_PROCID, ..."), "" when none
  std::string method;          // env | tcp | file | store | none | mpi
  int rank = 0;                // -1 with mpi when MPI decides
  int world_size = 1;
  std::string host;
  int port = 0;
  std::string path;
  Milliseconds timeout{0};
  // How long a rank other than 0 waits for rank 0's store to listen (first contact): DDP_RDZV_TIMEOUT, else the
  // shorter of kRdzvTimeout and `timeout`. `connect_source` names which, for messages.
  Milliseconds connect_timeout{0};
  std::string connect_source;
  at::Device device{at::kCPU};  // InitOptions::device, resolved
};

// The first-contact deadline without DDP_RDZV_TIMEOUT: a wrong MASTER_ADDR fails in two minutes, not in the
// collective timeout's ten.
constexpr Milliseconds kRdzvTimeout{120000};

// `mpi_available` and `nccl_available` tell whether auto may pick mpi or nccl. Throws
// std::invalid_argument naming the variable or option at fault.
Rendezvous resolve_rendezvous(const InitOptions& opts, const EnvFn& env, bool mpi_available,
                              bool nccl_available = false);

// DDP_EXIT_LINGER: seconds a rank that exits with a non-zero status waits first (ddprun's mpi launch sets it:
// mpirun, without its kill pause, ends the other ranks as soon as one exits, so peers failing alike record their
// own errors, and preempted peers finish, in this time). 0 when unset; InvalidArgument when not a number in [0, 60].
double exit_linger_s();
// Sleeps exit_linger_s() (0 on a malformed value: called on the way out, it must not throw).
void linger_before_failed_exit();

}  // namespace ddp::detail
