#include "requeue.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ddp/dist/launch_env.h"

extern char** environ;

namespace ddp::train::detail {
namespace le = launch_env;

std::string requeue_problem(const std::string& stop_signal) {
  if (stop_signal == "none") return "--requeue needs --stop-signal USR1 or USR2: the signal that requeues the job";
  const auto job = le::text(le::kSlurmJobId);
  if (!job)
    return std::string("--requeue needs a Slurm job to requeue, and ") + le::kSlurmJobId.name +
           " is unset: submit the run with sbatch, or leave --requeue out";
  if (job->find_first_not_of("0123456789") != std::string::npos)
    return std::string("--requeue: ") + le::kSlurmJobId.name + "='" + *job + "' is not a job id";
  return "";
}

std::string requeue_slurm_job() {
  const std::string job = le::text(le::kSlurmJobId).value_or("");
  std::vector<std::string> args = {"scontrol", "requeue", job};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (const int rc = ::posix_spawnp(&pid, "scontrol", nullptr, nullptr, argv.data(), environ); rc != 0)
    return "cannot run 'scontrol requeue " + job + "': " + std::strerror(rc) + " (is Slurm's scontrol on PATH?)";
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return "'scontrol requeue " + job + "' " +
         (WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                            : "ended by signal " + std::to_string(WTERMSIG(status)));
}

}  // namespace ddp::train::detail
