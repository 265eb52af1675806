// ddprun --max-restarts (torchrun's restarts on one node), through the built
// ddprun and the probe: the agent variables on every attempt, restarts used
// up, exit 75 (preempted), SIGTERM to ddprun (no restart), and --log-dir with
// --redirects / --tee. Both backends: gloo (ddprun starts the ranks) and mpi
// (ddprun starts mpirun again for each attempt).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "launcher_test_util.h"

using namespace ddprun_test;

namespace {

// "--backend X --nproc-per-node N --standalone" and the rest.
std::vector<std::string> args(const std::string& backend, int nproc, std::vector<std::string> rest) {
  std::vector<std::string> out = {
      "--backend", backend, "--nproc-per-node", std::to_string(nproc), "--standalone", "--monitor-interval", "0.1"};
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// The probe's "elastic ..." line for a rank on an attempt.
std::string elastic_line(const std::string& backend, int rank, int nproc, int attempt, int max_restarts,
                         const std::string& run_id, const std::string& role) {
  const std::string r = backend == "mpi" ? "<unset>" : std::to_string(rank);  // mpirun cannot set RANK per rank
  return "[rank " + std::to_string(rank) + "] elastic RESTART_COUNT=" + std::to_string(attempt) +
         " MAX_RESTARTS=" + std::to_string(max_restarts) + " RUN_ID=" + run_id + " ROLE_NAME=" + role +
         " ROLE_RANK=" + r + " ROLE_WORLD_SIZE=" + std::to_string(nproc) + " GROUP_WORLD_SIZE=1 RANK=" + r +
         " WORLD_SIZE=" + std::to_string(nproc) + "\n";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ddprun_elastic_XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using BackendNproc = std::tuple<std::string, int>;

class Restarts : public ::testing::TestWithParam<BackendNproc> {
 protected:
  void SetUp() override {
    if (std::get<0>(GetParam()) == "mpi" && !have_mpirun()) GTEST_SKIP() << "mpirun not found";
  }
};

// Rank 1 (rank 0 alone) fails on attempts 0 and 1; attempt 2 succeeds.
TEST_P(Restarts, SucceedOnTheThirdAttempt) {
  const auto [backend, nproc] = GetParam();
  const int failing = nproc > 1 ? 1 : 0;
  TempDir said;  // the failing rank fails once the others printed their lines
  RunResult r = run_ddprun(args(backend, nproc,
                                {"--max-restarts", "2", "--rdzv-id", "job7", "--role", "trainer", probe_path(),
                                 "restart", std::to_string(failing), "2", "3", said.path()}),
                           60);
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  for (int attempt = 0; attempt <= 2; ++attempt)
    for (int rank = 0; rank < nproc; ++rank)
      EXPECT_EQ(count(r.out, elastic_line(backend, rank, nproc, attempt, 2, "job7", "trainer")), 1u)
          << "rank " << rank << " attempt " << attempt << "\n"
          << diag(r);
  for (int rank = 0; rank < nproc; ++rank)
    EXPECT_EQ(count(r.out, "[rank " + std::to_string(rank) + "] done attempt=2\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "done attempt="), static_cast<size_t>(nproc)) << diag(r);
  EXPECT_EQ(count(r.err, "failure summary"), 2u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: restarting every rank (restart 1 of 2, --max-restarts 2)\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: restarting every rank (restart 2 of 2, --max-restarts 2)\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: attempt 2 succeeded after 2 restarts\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "exiting with code"), 0u) << diag(r);
}

// The same probe with one restart fewer: the second failure is final.
TEST_P(Restarts, ExhaustedRestartsFail) {
  const auto [backend, nproc] = GetParam();
  const int failing = nproc > 1 ? 1 : 0;
  TempDir said;
  RunResult r = run_ddprun(args(backend, nproc,
                                {"--max-restarts", "1", "--rdzv-id", "none", probe_path(), "restart",
                                 std::to_string(failing), "2", "3", said.path()}),
                           60);
  ASSERT_EQ(r.exit_code(), 3) << diag(r);
  for (int rank = 0; rank < nproc; ++rank) {
    EXPECT_EQ(count(r.out, elastic_line(backend, rank, nproc, 0, 1, "none", "default")), 1u) << diag(r);
    EXPECT_EQ(count(r.out, elastic_line(backend, rank, nproc, 1, 1, "none", "default")), 1u) << diag(r);
  }
  EXPECT_EQ(count(r.out, "RESTART_COUNT=2"), 0u) << diag(r);
  EXPECT_EQ(count(r.out, "done attempt="), 0u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: restarting every rank (restart 1 of 1, --max-restarts 1)\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: failed after 1 restart (--max-restarts 1): restarts exhausted\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: exiting with code 3\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "probe rank " + std::to_string(failing) + " failing with code 3 on attempt 1"), 2u)
      << diag(r);  // the rank's line and its stderr tail in the summary
}

// Exit 75 (preempted, checkpoint written) from every rank: restarted like any failure.
TEST_P(Restarts, PreemptedRanksAreRestarted) {
  const auto [backend, nproc] = GetParam();
  RunResult r = run_ddprun(args(backend, nproc, {"--max-restarts", "1", probe_path(), "restart", "-1", "1", "75"}), 60);
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  for (int rank = 0; rank < nproc; ++rank)
    EXPECT_EQ(count(r.out, "[rank " + std::to_string(rank) + "] done attempt=1\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "exited with code 75"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "ddprun: restarting every rank (restart 1 of 1, --max-restarts 1)\n"), 1u) << diag(r);
  // Without restarts left, 75 is the job's exit code.
  RunResult once = run_ddprun(args(backend, nproc, {probe_path(), "restart", "-1", "1", "75"}), 60);
  EXPECT_EQ(once.exit_code(), 75) << diag(once);
  EXPECT_EQ(count(once.out, "done attempt="), 0u) << diag(once);
}

// SIGTERM to ddprun during an attempt: forwarded, and no restart.
TEST_P(Restarts, SigtermStopsWithoutRestart) {
  const auto [backend, nproc] = GetParam();
  Launch launch(args(backend, nproc, {"--max-restarts", "3", probe_path(), "term-report"}));
  ASSERT_TRUE(launch.wait_for(
      [nproc = nproc](const std::string& out, const std::string&) {
        return count(out, "] ready\n") == static_cast<size_t>(nproc);
      },
      30));
  launch.send_signal(SIGTERM);
  RunResult r = launch.finish(30);
  EXPECT_EQ(r.exit_code(), 128 + SIGTERM) << diag(r);
  // mpirun may drop the last lines of a rank while it tears the job down (seen under load).
  if (backend == "gloo") {
    for (int rank = 0; rank < nproc; ++rank)
      EXPECT_EQ(count(r.out, "[rank " + std::to_string(rank) + "] got SIGTERM\n"), 1u) << diag(r);
  }
  EXPECT_GE(count(r.out, "got SIGTERM\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "] ready\n"), static_cast<size_t>(nproc)) << diag(r);  // nobody started again
  EXPECT_EQ(count(r.err, "restarting every rank"), 0u) << diag(r);
  EXPECT_EQ(count(r.err,
                  "ddprun: not restarting: ddprun received SIGTERM (the job is being stopped; 0 of 3 "
                  "restarts used)\n"),
            1u)
      << diag(r);
}

// SIGTERM to ddprun (preemption): every rank gets it at once and has the whole --kill-grace for its last step and
// checkpoint, over mpi too (mpirun's own forwarding would SIGKILL them 2 s later); ranks that exit 75 (saved) make
// ddprun exit 75, so that a scheduler can requeue the job, and are not restarted.
TEST_P(Restarts, PreemptedBySigtermExits75AfterASlowCheckpoint) {
  const auto [backend, nproc] = GetParam();
  Launch launch(
      args(backend, nproc, {"--max-restarts", "1", "--kill-grace", "60", probe_path(), "term-slow", "3", "75"}));
  ASSERT_TRUE(launch.wait_for(
      [nproc = nproc](const std::string& out, const std::string&) {
        return count(out, "] ready pid=") == static_cast<size_t>(nproc);
      },
      30));
  launch.send_signal(SIGTERM);
  RunResult r = launch.finish(60);
  EXPECT_EQ(r.exit_code(), 75) << diag(r);
  for (int rank = 0; rank < nproc; ++rank)
    EXPECT_EQ(count(r.out, "[rank " + std::to_string(rank) + "] saved after SIGTERM\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "] ready pid="), static_cast<size_t>(nproc)) << diag(r);  // nobody started again
  EXPECT_EQ(count(r.err,
                  "ddprun: the ranks were preempted: they wrote a checkpoint and exited with 75; exiting "
                  "with 75"),
            1u)
      << diag(r);
}

// --log-dir with --redirects 3 (files only) or --tee 3 (files and console),
// over a restart: attempt_0 and attempt_1 each hold every rank's lines.
TEST_P(Restarts, LogDirRedirectsAndTee) {
  const auto [backend, nproc] = GetParam();
  for (const std::string flag : {"--redirects", "--tee"}) {
    TempDir dir;
    ASSERT_FALSE(dir.path().empty());
    RunResult r = run_ddprun(args(backend, nproc,
                                  {"--max-restarts", "1", "--rdzv-id", "none", "--log-dir", dir.path(), flag, "3",
                                   probe_path(), "restart", "-1", "1", "5"}),
                             60);
    ASSERT_EQ(r.exit_code(), 0) << flag << "\n" << diag(r);
    const bool console = flag == "--tee";
    int failing_lines = 0;
    for (int attempt = 0; attempt <= 1; ++attempt) {
      for (int rank = 0; rank < nproc; ++rank) {
        const std::string base = dir.path() + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(rank);
        std::string line = elastic_line(backend, rank, nproc, attempt, 1, "none", "default");
        line = line.substr(line.find("] ") + 2);  // without the console prefix
        const std::string out = read_file(base + "/stdout.log");
        const std::string err = read_file(base + "/stderr.log");
        const std::string failing = "probe rank " + std::to_string(rank) + " failing with code 5 on attempt 0\n";
        if (attempt == 0) {
          EXPECT_EQ(out, line) << base << "\n" << diag(r);
          // The first rank to fail gets the others stopped, maybe before they wrote their line.
          EXPECT_TRUE(err.empty() || err == failing) << base << ": " << err;
          failing_lines += err.empty() ? 0 : 1;
        } else {
          EXPECT_EQ(out, line + "done attempt=1\n") << base << "\n" << diag(r);
          EXPECT_EQ(err, "") << base;
        }
        EXPECT_EQ(count(r.out, "[rank " + std::to_string(rank) + "] " + line), console ? 1u : 0u) << flag << diag(r);
      }
    }
    EXPECT_GE(failing_lines, 1) << flag << "\n" << diag(r);
    EXPECT_EQ(count(r.out, "[rank "), console ? static_cast<size_t>(3 * nproc) : 0u) << flag << "\n" << diag(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Restarts,
                         ::testing::Values(BackendNproc{"gloo", 1}, BackendNproc{"gloo", 2}, BackendNproc{"gloo", 3},
                                           BackendNproc{"mpi", 2}, BackendNproc{"mpi", 3}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_np" + std::to_string(std::get<1>(info.param));
                         });

// A fixed --master-port is used again by the restart once it is free.
TEST(RestartsFixedPort, SamePortOnEveryAttempt) {
  const int port = free_port();
  RunResult r = run_ddprun({"--nproc-per-node", "2", "--master-port", std::to_string(port), "--max-restarts", "1",
                            probe_path(), "restart", "0", "1", "4"},
                           60);
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "done attempt=1"), 2u) << diag(r);
}

TEST(RestartsOptions, BadValuesAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--max-restarts", "-1", "x"}, "ddprun: invalid value '-1' for --max-restarts: expected an integer >= 0\n"},
      {{"--redirects", "4", "--log-dir", "/tmp", "x"},
       "ddprun: invalid value '4' for --redirects: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)\n"},
      {{"--tee", "x", "--log-dir", "/tmp", "x"},
       "ddprun: invalid value 'x' for --tee: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)\n"},
      {{"--redirects", "3", "x"},
       "ddprun: --redirects needs --log-dir DIR: the directory the ranks' log files are "
       "written to\n"},
      {{"--monitor-interval", "0", "x"},
       "ddprun: invalid value '0' for --monitor-interval: expected a number of seconds > 0 and <= 60 (e.g. 0.1)\n"},
      {{"--nnodes", "2", "--max-restarts", "1", "x"},
       "ddprun: --max-restarts 1 across nodes (--nnodes 2) needs --rdzv-backend c10d and --rdzv-endpoint "
       "HOST[:PORT]: the static rendezvous has fixed node ranks and cannot re-rendezvous\n"},
  };
  for (const Case& c : cases) {
    RunResult r = run_ddprun(c.args, 20);
    EXPECT_EQ(r.exit_code(), 2) << diag(r);
    EXPECT_EQ(r.err, c.error);
  }
}

}  // namespace
