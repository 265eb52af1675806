// Starting one child process with its stdout/stderr connected to pipes.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace ddprun {

struct SpawnSpec {
  std::string exec_path;          // path given to execve()
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "KEY=VALUE"
  std::string label;              // used in the exec error message, e.g. "rank 3"
  // Sent to the child when ddprun dies, even by SIGKILL (Linux PR_SET_PDEATHSIG;
  // 0: none). SIGKILL for ranks; SIGTERM for mpirun, which then stops its ranks.
  int death_signal = SIGKILL;
};

struct SpawnedChild {
  pid_t pid = -1;
  int out_fd = -1;    // read end of the child's stdout (non-blocking, close-on-exec)
  int err_fd = -1;    // read end of the child's stderr
  std::string error;  // set when fork/pipe failed (pid == -1)
};

// Forks and execs; call it from the main thread (the death signal fires when
// the forking *thread* exits). The child gets its own process group (pgid ==
// pid), stdin from /dev/null, default signal dispositions, an empty signal
// mask and spec.death_signal as its parent-death signal. When
// execve() fails the child prints "ddprun: cannot execute ..." on its stderr
// and exits with code 127.
SpawnedChild spawn_child(const SpawnSpec& spec);

// Direct children of `parent` (read from /proc on Linux; empty elsewhere).
std::vector<pid_t> child_pids_of(pid_t parent);

// Direct children of `parent` with their /proc state letter ('T': stopped by
// a signal, 'S' sleeping, 'Z' zombie...); empty where /proc is missing.
std::vector<std::pair<pid_t, char>> child_states_of(pid_t parent);

// OMPI_COMM_WORLD_RANK from the environment of process `pid`; -1 when unknown.
int mpi_rank_of(pid_t pid);

}  // namespace ddprun
