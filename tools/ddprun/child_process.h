// Starting one child process with its stdout/stderr connected to pipes.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun {

struct SpawnSpec {
  std::string exec_path;          // path given to execve()
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "KEY=VALUE"
  std::string label;              // used in the exec error message, e.g. "rank 3"
};

struct SpawnedChild {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout (non-blocking, close-on-exec)
  int err_fd = -1;  // read end of the child's stderr
  std::string error;  // set when fork/pipe failed (pid == -1)
};

// Forks and execs. The child gets its own process group (pgid == pid), stdin
// from /dev/null, default signal dispositions and an empty signal mask. When
// execve() fails the child prints "ddprun: cannot execute ..." on its stderr
// and exits with code 127.
SpawnedChild spawn_child(const SpawnSpec& spec);

// Direct children of `parent` (read from /proc on Linux; empty elsewhere).
std::vector<pid_t> child_pids_of(pid_t parent);

}  // namespace ddprun
