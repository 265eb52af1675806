// Signal names and the self-pipe that turns signals into poll() events.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

// "SIGKILL" for 9; "SIG<n>" for numbers without a known name.
std::string signal_name(int sig);

// "exit code 3" or "signal 9 (SIGKILL)" for a waitpid() status.
std::string describe_wait_status(int status);

// Exit code that mirrors a waitpid() status: the exit code, or 128+signal.
int exit_code_of_wait_status(int status);

// Installs handlers for the given signals that write the signal number into a
// non-blocking, close-on-exec pipe; poll() read_fd() and call drain(). Only
// one instance may exist at a time. The destructor restores the old handlers.
class SignalPipe {
 public:
  explicit SignalPipe(const std::vector<int>& signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int read_fd() const { return fds_[0]; }
  // Signals received since the last call, in order of arrival.
  std::vector<int> drain();

 private:
  int fds_[2] = {-1, -1};
  std::vector<int> signals_;
  std::vector<void*> old_actions_;
};

// In a freshly forked child: default dispositions for the signals ddprun
// handles or ignores, and an empty signal mask.
void reset_signals_in_child();

}  // namespace ddprun
