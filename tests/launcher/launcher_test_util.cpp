#include "launcher_test_util.h"

#include <algorithm>
#include "support/free_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace ddprun_test {

double now_seconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string ddprun_path() { return DDPRUN_PATH; }
std::string probe_path() { return DDPRUN_PROBE_PATH; }
std::string error_probe_path() { return DDPRUN_ERROR_PROBE_PATH; }

int online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n >= 1 ? static_cast<int>(n) : 1;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + needle.size())) ++n;
  return n;
}

ListeningSocket::ListeningSocket() {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd_, 0);
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(fd_, 1), 0);
  EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  port_ = ntohs(addr.sin_port);
}

void ListeningSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool have_mpirun() {
#ifdef DDPRUN_HAVE_MPIRUN
  return true;
#else
  return false;
#endif
}

int free_port() { return ddp::test::free_port(); }

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

const char* const kLauncherVars[] = {"RANK",
                                     "LOCAL_RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_WORLD_SIZE",
                                     "GROUP_RANK",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "OMP_NUM_THREADS",
                                     "DDP_BACKEND",
                                     "DDP_LAUNCHER",
                                     "OMPI_COMM_WORLD_RANK",
                                     "DDP_TIMEOUT",
                                     "DDP_HEARTBEAT_TIMEOUT",
                                     "TORCHELASTIC_ERROR_FILE",
                                     "DDP_SPAWN_CHILD"};

std::vector<std::string> test_environment(const EnvChanges& changes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    bool drop = false;
    for (const char* var : kLauncherVars) drop = drop || key == var;
    for (const auto& kv : changes) drop = drop || key == kv.first;
    if (!drop) env.push_back(entry);
  }
  for (const auto& kv : changes) env.push_back(kv.first + "=" + kv.second);
  return env;
}

}  // namespace

bool RunResult::exited() const { return status >= 0 && WIFEXITED(status); }
int RunResult::exit_code() const { return exited() ? WEXITSTATUS(status) : -1; }
std::vector<std::string> RunResult::out_lines() const { return split_lines(out); }
std::vector<std::string> RunResult::err_lines() const { return split_lines(err); }

Launch::Launch(const std::vector<std::string>& args, const EnvChanges& env) {
  std::vector<std::string> argv = {ddprun_path()};
  // The local launcher's cases: --backend gloo unless a test names one (auto would pick mpi for a ddp program).
  if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a.rfind("--backend", 0) == 0; }))
    argv.push_back("--backend=gloo");
  argv.insert(argv.end(), args.begin(), args.end());
  start(argv, env);
}

Launch::Launch(const Program& program, const std::vector<std::string>& args, const EnvChanges& env) {
  std::vector<std::string> argv = {program.path};
  argv.insert(argv.end(), args.begin(), args.end());
  start(argv, env);
}

void Launch::start(const std::vector<std::string>& argv, const EnvChanges& env) {
  std::vector<std::string> envs = test_environment(env);
  std::vector<char*> c_argv, c_env;
  for (auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (auto& e : envs) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  start_ = now_seconds();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(126);
  }
  setpgid(pid_, pid_);
  close(out_pipe[1]);
  close(err_pipe[1]);
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
}

Launch::~Launch() {
  if (!finished_) finish(5);
}

bool Launch::pump(int timeout_ms) {
  struct pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) return false;
  int rc = poll(fds, static_cast<nfds_t>(n), timeout_ms);
  if (rc <= 0) return true;
  for (int i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    char buffer[65536];
    ssize_t got = read(fds[i].fd, buffer, sizeof buffer);
    bool is_out = fds[i].fd == out_fd_;
    if (got > 0) {
      (is_out ? result_.out : result_.err).append(buffer, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      close(fds[i].fd);
      (is_out ? out_fd_ : err_fd_) = -1;
    }
  }
  return true;
}

bool Launch::wait_for(const std::function<bool(const std::string&, const std::string&)>& pred, double timeout_s) {
  const double deadline = now_seconds() + timeout_s;
  while (!pred(result_.out, result_.err)) {
    double left = deadline - now_seconds();
    if (left <= 0) return false;
    if (!pump(static_cast<int>(left * 1000) + 1) && !pred(result_.out, result_.err)) return false;
  }
  return true;
}

void Launch::send_signal(int sig) { kill(pid_, sig); }

RunResult Launch::finish(double timeout_s) {
  if (finished_) return result_;
  const double deadline = now_seconds() + timeout_s;
  int stage = 0;  // 0: waiting, 1: SIGTERM sent, 2: SIGKILL sent
  for (;;) {
    int status = 0;
    if (result_.status < 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      result_.status = status;
      result_.seconds = now_seconds() - start_;
    }
    if (result_.status >= 0 && out_fd_ < 0 && err_fd_ < 0) break;
    double now = now_seconds();
    if (now > deadline + (stage == 0 ? 0 : 3 * stage)) {
      result_.timed_out = true;
      if (stage < 2) {
        kill(stage == 0 ? pid_ : -pid_, stage == 0 ? SIGTERM : SIGKILL);
        ++stage;
      } else {
        // Give up on the pipes (a leftover process may hold them open).
        if (out_fd_ >= 0) close(out_fd_), out_fd_ = -1;
        if (err_fd_ >= 0) close(err_fd_), err_fd_ = -1;
        if (result_.status < 0) {
          waitpid(pid_, &status, 0);
          result_.status = status;
          result_.seconds = now_seconds() - start_;
        }
        break;
      }
    }
    if (!pump(50) && result_.status < 0) usleep(10000);
  }
  finished_ = true;
  return result_;
}

RunResult run_ddprun(const std::vector<std::string>& args, double timeout_s, const EnvChanges& env) {
  Launch launch(args, env);
  return launch.finish(timeout_s);
}

std::string diag(const RunResult& r) {
  return "exit status " + std::to_string(r.status) + (r.timed_out ? " (timed out)" : "") + " after " +
         std::to_string(r.seconds) + " s\n--- stdout:\n" + r.out.substr(0, 6000) + "\n--- stderr:\n" +
         r.err.substr(0, 6000);
}

}  // namespace ddprun_test
