// Helpers for tests that run the built ddprun: start it with captured
// stdout/stderr, wait for output, send signals, and time-bound everything.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun_test {

struct RunResult {
  int status = -1;         // waitpid() status
  bool timed_out = false;  // the deadline passed and ddprun was killed
  std::string out, err;
  double seconds = 0;  // wall time from start to exit

  bool exited() const;
  int exit_code() const;  // -1 when not exited normally
  std::vector<std::string> out_lines() const;
  std::vector<std::string> err_lines() const;
};

using EnvChanges = std::vector<std::pair<std::string, std::string>>;

// A running ddprun (in its own process group). The environment is the test's
// own minus all launcher variables (RANK, OMP_NUM_THREADS, DDP_BACKEND, ...),
// plus `env`. Launch(args) adds --backend=gloo unless args name a backend.
// Another program than ddprun, for Launch (e.g. a program calling ddp::spawn).
struct Program {
  std::string path;
};

class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args, const EnvChanges& env = {});
  // Runs `program` with args instead of ddprun, in the same environment.
  Launch(const Program& program, const std::vector<std::string>& args, const EnvChanges& env = {});
  ~Launch();

  // Reads output until pred(out, err) holds; false after timeout_s.
  bool wait_for(const std::function<bool(const std::string& out, const std::string& err)>& pred, double timeout_s);
  void send_signal(int sig);
  // Reads until ddprun exits and its pipes close. After timeout_s, ddprun gets
  // SIGTERM, then SIGKILL, and timed_out is set.
  RunResult finish(double timeout_s);

 private:
  void start(const std::vector<std::string>& argv, const EnvChanges& env);
  bool pump(int timeout_ms);  // false when both pipes are closed
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  double start_ = 0;
  RunResult result_;
  bool finished_ = false;
};

// Runs ddprun with args to completion.
RunResult run_ddprun(const std::vector<std::string>& args, double timeout_s = 30, const EnvChanges& env = {});

// Paths of the binaries under test (compile definitions).
std::string ddprun_path();
std::string probe_path();
std::string error_probe_path();  // ddprun_error_probe (uses ddp::run_main)

// Gone: no such process, or a zombie nobody reaped yet (it no longer runs).
bool gone(pid_t pid);

// Whether mpirun was found when the tests were configured (--backend mpi cases).
bool have_mpirun();

// A TCP port that was free on 127.0.0.1 a moment ago.
int free_port();

// A socket listening on 127.0.0.1 at a port of the kernel's choosing, so that
// the port is in use until close() or destruction.
class ListeningSocket {
 public:
  ListeningSocket();  // fails the current test (gtest) when it cannot listen
  ~ListeningSocket() { close(); }
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;
  int port() const { return port_; }
  void close();

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Number of online cores, as ddprun sees them.
int online_cpus();

// Number of times `needle` occurs in `hay`.
size_t count(const std::string& hay, const std::string& needle);

double now_seconds();

// A failed run's exit status, time and (the start of) its output, for assertion messages.
std::string diag(const RunResult& r);

}  // namespace ddprun_test
