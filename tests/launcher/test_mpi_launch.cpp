// ddprun --backend mpi: runs the probe through mpirun (only built when
// mpirun was found at configure time).
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>

#include "launcher_test_util.h"

using namespace ddprun_test;

namespace {}  // namespace

class MpiEnv : public ::testing::TestWithParam<int> {};

TEST_P(MpiEnv, RanksGetEnvironmentAndPrefixes) {
  const int np = GetParam();
  const int port = free_port();
  RunResult r = run_ddprun({"--backend", "mpi", "--nproc-per-node", std::to_string(np), "--master-port",
                            std::to_string(port), probe_path(), "env"},
                           30, {{"RANK", "77"}, {"LOCAL_RANK", "5"}});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  std::map<int, std::map<std::string, std::string>> env;
  static const std::regex line_re(R"(^\[rank (\d+)\] ([A-Z_]+)=(.*)$)");
  for (const std::string& line : r.out_lines()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "malformed line: " << line << "\n" << diag(r);
    env[std::stoi(m[1].str())][m[2].str()] = m[3].str();
  }
  ASSERT_EQ(r.out_lines().size(), static_cast<size_t>(np) * 11) << diag(r);
  ASSERT_EQ(env.size(), static_cast<size_t>(np)) << diag(r);
  for (int rank = 0; rank < np; ++rank) {
    std::map<std::string, std::string> expected = {{"RANK", "<unset>"},  // MPI provides OMPI_COMM_WORLD_RANK instead
                                                   {"LOCAL_RANK", "<unset>"},
                                                   {"WORLD_SIZE", std::to_string(np)},
                                                   {"LOCAL_WORLD_SIZE", std::to_string(np)},
                                                   {"GROUP_RANK", "0"},
                                                   {"MASTER_ADDR", "127.0.0.1"},
                                                   {"MASTER_PORT", std::to_string(port)},
                                                   {"OMP_NUM_THREADS", std::to_string(std::max(1, online_cpus() / np))},
                                                   {"DDP_BACKEND", "mpi"},
                                                   {"DDP_LAUNCHER", "ddprun"},
                                                   {"OMPI_COMM_WORLD_RANK", std::to_string(rank)}};
    EXPECT_EQ(env[rank], expected) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Np1To3, MpiEnv, ::testing::Values(1, 2, 3));

TEST(MpiLaunch, KeepsOmpNumThreads) {
  RunResult r = run_ddprun({"--backend=mpi", "--nproc-per-node=2", "--standalone", probe_path(), "env"}, 30,
                           {{"OMP_NUM_THREADS", "3"}});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "] OMP_NUM_THREADS=3\n"), 2u) << diag(r);
}

// Ranks that write their lines in pieces at the same time: mpirun puts the pieces of several ranks in one of its
// lines, each behind its tag; every rank's line comes out whole under its own prefix, and a last line without a
// newline too.
TEST(MpiLaunch, LinesInPiecesStayWithTheirRank) {
  const std::string script =
      "r=$OMPI_COMM_WORLD_RANK; printf \"partial-$r\"; sleep 0.$((2 * r)); echo \" line-$r\"; sleep 0.7; "
      "printf \"tail-$r\"";
  RunResult r = run_ddprun({"--backend=mpi", "--nproc-per-node=3", "--standalone", "sh", "-c", script}, 30);
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  std::vector<std::string> lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines,
            (std::vector<std::string>{"[rank 0] partial-0 line-0", "[rank 0] tail-0", "[rank 1] partial-1 line-1",
                                      "[rank 1] tail-1", "[rank 2] partial-2 line-2", "[rank 2] tail-2"}))
      << diag(r);
}

// mpirun's kill pause off and the ranks' exit linger on (docs/launcher.md, "A rank that dies under --backend mpi");
// values the user set are kept.
TEST(MpiLaunch, KillPauseOffAndExitLingerOnUnlessSet) {
  RunResult r = run_ddprun({"--backend=mpi", "--nproc-per-node=2", "--standalone", "env"}, 30);
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "] OMPI_MCA_odls_base_sigkill_timeout=0\n"), 2u) << diag(r);
  EXPECT_EQ(count(r.out, "] DDP_EXIT_LINGER=0.5\n"), 2u) << diag(r);
  r = run_ddprun({"--backend=mpi", "--nproc-per-node=2", "--standalone", "env"}, 30,
                 {{"OMPI_MCA_odls_base_sigkill_timeout", "1"}, {"DDP_EXIT_LINGER", "0.2"}});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "] OMPI_MCA_odls_base_sigkill_timeout=1\n"), 2u) << diag(r);
  EXPECT_EQ(count(r.out, "] DDP_EXIT_LINGER=0.2\n"), 2u) << diag(r);
}

TEST(MpiLaunch, FailingRankIsNamed) {
  RunResult r =
      run_ddprun({"--backend", "mpi", "--nproc-per-node", "3", "--standalone", probe_path(), "fail", "1", "3"}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.seconds, 15.0);
  EXPECT_EQ(r.exit_code(), 3) << diag(r);
  EXPECT_NE(r.err.find("[rank 1] probe rank 1 failing with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: first failed rank: rank 1 exited with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun:   | probe rank 1 failing with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("[mpirun] "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: exiting with code 3\n"), std::string::npos) << diag(r);
}

TEST(MpiLaunch, RankKilledBySignalIsNamed) {
  RunResult r =
      run_ddprun({"--backend", "mpi", "--nproc-per-node", "2", "--standalone", probe_path(), "signal", "1", "9"}, 30);
  EXPECT_LT(r.seconds, 15.0);
  EXPECT_EQ(r.exit_code(), 137) << diag(r);
  EXPECT_NE(r.err.find("ddprun: first failed rank: rank 1 was killed by signal 9 (SIGKILL)\n"), std::string::npos)
      << diag(r);
}

TEST(MpiLaunch, SigtermIsForwardedToMpirun) {
  Launch launch({"--backend", "mpi", "--nproc-per-node", "2", "--standalone", probe_path(), "term-report"});
  ASSERT_TRUE(launch.wait_for(
      [](const std::string& out, const std::string&) {
        return count(out, "[rank 0] ready\n") == 1 && count(out, "[rank 1] ready\n") == 1;
      },
      15));
  const double sent = now_seconds();
  launch.send_signal(SIGTERM);
  RunResult r = launch.finish(20);
  EXPECT_LT(now_seconds() - sent, 10.0);
  EXPECT_EQ(r.exit_code(), 143) << diag(r);
  EXPECT_NE(r.err.find("ddprun: received SIGTERM and forwarded it to the ranks\n"), std::string::npos) << diag(r);
}
