// Slurm's srun as a launcher: a task that srun started directly (no RANK or WORLD_SIZE, not mpirun's) finds
// where it is in Slurm's variables, under the names ddprun would have set, as PyTorch Lightning's
// SLURMEnvironment does. A variable set explicitly always wins. Torch-free: ddprun links it too.
//
//   srun --nodes 2 --ntasks-per-node 4 ddp-train cifar10-resnet18     # 8 ranks, gloo, no MASTER_ADDR to set
//
//   RANK             SLURM_PROCID          LOCAL_RANK        SLURM_LOCALID
//   WORLD_SIZE       SLURM_STEP_NUM_TASKS  LOCAL_WORLD_SIZE  SLURM_STEP_TASKS_PER_NODE, this node's entry
//   GROUP_RANK       SLURM_NODEID          GROUP_WORLD_SIZE  SLURM_STEP_NUM_NODES
//   MASTER_ADDR      the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST)
//   MASTER_PORT      15000 + the last four digits of SLURM_JOB_ID (Lightning's rule)
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/launch_env.h"

namespace ddp::slurm {

// Slurm's host list, expanded in order: "node[01-04,07],gpu5" -> node01 node02 node03 node04 node07 gpu5 (a range
// keeps its low bound's digits: [8-10] -> 8 9 10, [08-10] -> 08 09 10; several brackets multiply out).
// InvalidArgument naming `what` and the fault on a malformed list.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& what = "the host list");
// Tasks per node as Slurm writes them: "2(x3),1" -> 2 2 2 1. InvalidArgument naming `what` when malformed.
std::vector<int> expand_tasks_per_node(const std::string& spec, const std::string& what = "the tasks per node");
// MASTER_PORT for a job: 15000 + the job id's last four digits (in [15000, 24999]). InvalidArgument when the id
// is not a number.
int port_of_job(const std::string& job_id);

// True when `env` (a process's own, without derivations) is a task of an srun step that no other launcher
// placed: SLURM_PROCID and SLURM_STEP_NUM_TASKS set; RANK, WORLD_SIZE and mpirun's OMPI_COMM_WORLD_SIZE unset.
bool srun_task(const launch_env::EnvFn& env);

struct Derived {
  std::string value;
  std::string source;     // "SLURM_PROCID", "the first host of SLURM_STEP_NODELIST", ...
  bool computed = false;  // not a copy of `source` (a host of a list, a port from the job id)
};
// The launcher variable `name` (one of the table above) from Slurm's, when `env` is an srun task and `name` is
// unset in it; nullopt otherwise. InvalidArgument naming the Slurm variable when it is malformed.
std::optional<Derived> derive(const std::string& name, const launch_env::EnvFn& env);
// `env` with the derivations where a variable is unset (`env` itself when it is no srun task).
launch_env::EnvFn with_slurm(launch_env::EnvFn env);
// The process's own environment with the derivations: what readers of LOCAL_RANK or LOCAL_WORLD_SIZE use.
launch_env::EnvFn process();
// For a job's first line: "RANK from SLURM_PROCID, WORLD_SIZE from SLURM_STEP_NUM_TASKS, MASTER_ADDR node01 (the
// first host of SLURM_STEP_NODELIST), ..." for each variable of the table taken from Slurm; "" when none.
std::string placement(const launch_env::EnvFn& env);

// A process in a Slurm job of several tasks that srun did not start (the batch script itself, no launcher):
// what to do instead, for an error; "" in any other case.
std::string not_started_by_srun(const launch_env::EnvFn& env);

}  // namespace ddp::slurm
