// Creating process groups, the way torch.distributed does:
//
//   ddp::init_process_group();            // env:// from ddprun/torchrun, or a world of 1
//   auto g = ddp::default_group();
//   ...
//   ddp::destroy_process_group();
#pragma once
#include <string>
#include <vector>

#include "ddp/dist/backend.h"

namespace ddp {

struct InitOptions {
  // gloo | mpi | nccl | local | auto. auto: DDP_BACKEND if set; nccl for a GPU
  // `device` when built; mpi under mpirun or Slurm when built; local for a world
  // of one; else gloo.
  std::string backend = "auto";
  // The job's tensors: cpu | cuda (the rank's GPU, LOCAL_RANK's) | cuda:N | auto
  // (resolve_device in ddp/dist/device.h). nccl's GPU; CPU tensors still work on
  // every backend (nccl stages them through its GPU).
  std::string device = "cpu";
  // env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) | tcp://host:port |
  // file:///path. Ignored when `store` is given.
  std::string init_method = "env://";
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  // 0: DDP_TIMEOUT (seconds) from the environment, else 10 minutes.
  Milliseconds timeout{0};
  // Heartbeat (gloo over env:// or tcp://; mpi with MPI_THREAD_MULTIPLE): a peer,
  // or rank 0's store, silent this long ends the rank with a message naming it.
  // -1: DDP_HEARTBEAT_TIMEOUT (seconds) from the environment, else 30 s; 0: off.
  Milliseconds heartbeat_timeout{-1};
  StorePtr store;  // rendezvous on this store instead of init_method
};

// Creates a group from the options and environment; touches no global state.
GroupPtr create_process_group(const InitOptions& opts = {});

// Creates the default group (an error if one exists) and returns it.
GroupPtr init_process_group(const InitOptions& opts = {});
bool is_initialized();
// The default group; throws ddp::Error if init_process_group was not called.
GroupPtr default_group();
void destroy_process_group();
// Subgroup of the default group (or of `parent`); see ProcessGroup::new_group.
GroupPtr new_group(const std::vector<int>& ranks, GroupPtr parent = nullptr);

// Rank and world size in the default group; as in PyTorch, ddp::Error before
// init_process_group.
int get_rank();
int get_world_size();

}  // namespace ddp
