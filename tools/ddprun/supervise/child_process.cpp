#include "supervise/child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ddp/dist/launch_env.h"
#include "supervise/signals.h"

namespace ddprun {

namespace {

bool make_pipe(int fds[2]) {
  if (::pipe(fds) != 0) return false;
  for (int i = 0; i < 2; ++i) ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  return true;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void child_fail(const std::string& what) {
  std::string message = "ddprun: " + what + ": " + std::strerror(errno) + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, message.data(), message.size());
  (void)ignored;
  ::_exit(127);
}

}  // namespace

SpawnedChild spawn_child(const SpawnSpec& spec) {
  SpawnedChild out;
  int out_pipe[2], err_pipe[2];
  if (!make_pipe(out_pipe)) {
    out.error = std::string("pipe() failed: ") + std::strerror(errno);
    return out;
  }
  if (!make_pipe(err_pipe)) {
    out.error = std::string("pipe() failed: ") + std::strerror(errno);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return out;
  }
  // Everything the child needs is prepared before fork().
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  const std::string exec_error = "cannot execute '" + spec.exec_path + "' for " + spec.label;

  const pid_t parent = ::getpid();  // to detect that ddprun died before prctl() below
  // Signals wait until the child has reset ddprun's handlers: a SIGTERM that stops the job while this child
  // is still ddprun would otherwise run ddprun's handler in it and reach ddprun's own signal pipe.
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    out.error = std::string("fork() failed: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    return out;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    reset_signals_in_child();  // default handlers, then nothing blocked: a pending SIGTERM ends the child
#ifdef __linux__
    if (spec.death_signal > 0) {
      ::prctl(PR_SET_PDEATHSIG, spec.death_signal);
      if (::getppid() != parent) {  // ddprun already died: never run orphaned
        ::raise(spec.death_signal);
        ::_exit(128 + spec.death_signal);
      }
    }
#else
    (void)parent;
#endif
    if (::dup2(err_pipe[1], STDERR_FILENO) < 0) ::_exit(127);
    if (::dup2(out_pipe[1], STDOUT_FILENO) < 0) child_fail("dup2");
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0 && null_fd != STDIN_FILENO) {
      ::dup2(null_fd, STDIN_FILENO);
      ::close(null_fd);
    }
    ::execve(spec.exec_path.c_str(), argv.data(), envp.data());
    child_fail(exec_error);
  }
  // Both parent and child call setpgid() so that the group exists before
  // anyone signals it; EACCES (child already exec'd) is fine.
  ::setpgid(pid, pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  for (int fd : {out_pipe[0], err_pipe[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  out.pid = pid;
  out.out_fd = out_pipe[0];
  out.err_fd = err_pipe[0];
  return out;
}

std::vector<pid_t> child_pids_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& child : child_states_of(parent)) out.push_back(child.first);
  return out;
}

std::vector<std::pair<pid_t, char>> child_states_of(pid_t parent) {
  std::vector<std::pair<pid_t, char>> out;
#ifdef __linux__
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (struct dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    std::ifstream stat_file(std::string("/proc/") + entry->d_name + "/stat");
    std::string stat;
    if (!std::getline(stat_file, stat)) continue;
    // Format: pid (comm) state ppid ...; comm may contain spaces and ')'.
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    std::string state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == parent && !state.empty()) out.emplace_back(static_cast<pid_t>(pid), state[0]);
  }
  ::closedir(dir);
#else
  (void)parent;
#endif
  return out;
}

int mpi_rank_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = std::string(ddp::launch_env::kOmpiRank.name) + "=";
  for (std::string entry; std::getline(in, entry, '\0');) {
    if (entry.compare(0, key.size(), key) != 0) continue;
    char* end = nullptr;
    long rank = std::strtol(entry.c_str() + key.size(), &end, 10);
    return *end == '\0' && rank >= 0 ? static_cast<int>(rank) : -1;
  }
  return -1;
}

}  // namespace ddprun
