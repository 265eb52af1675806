// Runs the built ddprun on the probe program and checks environment, output
// multiplexing, failure handling and signals.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>

#include "launcher_test_util.h"

using namespace ddprun_test;

namespace {

using EnvByRank = std::map<int, std::map<std::string, std::string>>;

// Parses "[rank R] KEY=VALUE" lines of the probe's env mode.
EnvByRank env_by_rank(const RunResult& r) {
  EnvByRank out;
  static const std::regex line_re(R"(^\[rank (\d+)\] ([A-Z_]+)=(.*)$)");
  for (const std::string& line : r.out_lines()) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, line_re)) << "malformed line: " << line;
    if (m.empty()) continue;
    int rank = std::stoi(m[1].str());
    EXPECT_EQ(out[rank].count(m[2].str()), 0u) << "duplicate " << line;
    out[rank][m[2].str()] = m[3].str();
  }
  return out;
}

}  // namespace

class EnvPerNproc : public ::testing::TestWithParam<int> {};

TEST_P(EnvPerNproc, ExactVariablesForEveryRank) {
  const int nproc = GetParam();
  const int port = free_port();
  RunResult r = run_ddprun(
      {"--nproc-per-node", std::to_string(nproc), "--master-port", std::to_string(port), probe_path(), "env"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(r.err, "");
  EnvByRank env = env_by_rank(r);
  ASSERT_EQ(env.size(), static_cast<size_t>(nproc)) << diag(r);
  EXPECT_EQ(r.out_lines().size(), static_cast<size_t>(nproc) * 11);
  for (int rank = 0; rank < nproc; ++rank) {
    std::map<std::string, std::string> expected = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(nproc)},
        {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
        {"GROUP_RANK", "0"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(port)},
        {"OMP_NUM_THREADS", std::to_string(std::max(1, online_cpus() / nproc))},
        {"DDP_BACKEND", "gloo"},  // Launch passes --backend=gloo
        {"DDP_LAUNCHER", "ddprun"},
        {"OMPI_COMM_WORLD_RANK", "<unset>"}};
    EXPECT_EQ(env[rank], expected) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Nproc1To4, EnvPerNproc, ::testing::Values(1, 2, 3, 4));

TEST(Launch, SecondNodeOffsetsRanks) {
  RunResult r = run_ddprun({"--nnodes=2", "--node_rank=1", "--nproc_per_node=2", "--master_addr=10.9.8.7",
                            "--master_port=23456", "--backend=gloo", probe_path(), "env"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EnvByRank env = env_by_rank(r);
  ASSERT_EQ(env.size(), 2u) << diag(r);
  for (int local = 0; local < 2; ++local) {
    auto& e = env[2 + local];
    EXPECT_EQ(e["RANK"], std::to_string(2 + local));
    EXPECT_EQ(e["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(e["WORLD_SIZE"], "4");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_RANK"], "1");
    EXPECT_EQ(e["MASTER_ADDR"], "10.9.8.7");
    EXPECT_EQ(e["MASTER_PORT"], "23456");
    EXPECT_EQ(e["DDP_BACKEND"], "gloo");
  }
}

TEST(Launch, KeepsOmpNumThreadsFromEnvironment) {
  RunResult r =
      run_ddprun({"--nproc-per-node", "2", "--standalone", probe_path(), "env"}, 30, {{"OMP_NUM_THREADS", "7"}});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EnvByRank env = env_by_rank(r);
  ASSERT_EQ(env.size(), 2u) << diag(r);
  EXPECT_EQ(env[0]["OMP_NUM_THREADS"], "7");
  EXPECT_EQ(env[1]["OMP_NUM_THREADS"], "7");
}

TEST(Launch, StandaloneUsesOneFreeLocalPort) {
  RunResult r = run_ddprun({"--standalone", "--nproc-per-node", "3", "--master-addr", "10.0.0.1", probe_path(), "env"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EnvByRank env = env_by_rank(r);
  ASSERT_EQ(env.size(), 3u);
  const std::string port = env[0]["MASTER_PORT"];
  EXPECT_NE(port, "29500");
  EXPECT_GE(std::stoi(port), 1024);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(env[rank]["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env[rank]["MASTER_PORT"], port);
  }
}

TEST(Launch, ProgramArgumentsArePassedVerbatim) {
  RunResult r = run_ddprun(
      {"--master-port", std::to_string(free_port()), "--", probe_path(), "args", "a b", "--nproc-per-node", "3", ""});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(r.out, "[rank 0] arg[0]=a b\n[rank 0] arg[1]=--nproc-per-node\n[rank 0] arg[2]=3\n[rank 0] arg[3]=\n");
}

TEST(Launch, ManyLinesFromEveryRankStayWhole) {
  const int nproc = 3, lines = 2000, every = 10;
  RunResult r = run_ddprun({"--nproc-per-node", std::to_string(nproc), "--master-port", std::to_string(free_port()),
                            probe_path(), "spam", std::to_string(lines), std::to_string(every)});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  static const std::regex out_re(R"(^\[rank (\d+)\] spam rank=(\d+) i=(\d+) (x*)$)");
  static const std::regex err_re(R"(^\[rank (\d+)\] spam-err rank=(\d+) i=(\d+)$)");
  std::vector<int> next(nproc, 0), next_err(nproc, 0);
  size_t bad = 0;
  for (const std::string& line : r.out_lines()) {
    std::smatch m;
    if (!std::regex_match(line, m, out_re) || m[1].str() != m[2].str()) {
      if (++bad < 5) ADD_FAILURE() << "malformed stdout line: " << line.substr(0, 200);
      continue;
    }
    int rank = std::stoi(m[1].str()), i = std::stoi(m[3].str());
    ASSERT_LT(rank, nproc);
    EXPECT_EQ(i, next[rank]) << "rank " << rank << " lost or reordered a line";
    EXPECT_EQ(m[4].length(), static_cast<size_t>(i % 97));
    next[rank] = i + 1;
  }
  for (const std::string& line : r.err_lines()) {
    std::smatch m;
    if (!std::regex_match(line, m, err_re) || m[1].str() != m[2].str()) {
      if (++bad < 5) ADD_FAILURE() << "malformed stderr line: " << line.substr(0, 200);
      continue;
    }
    int rank = std::stoi(m[1].str()), i = std::stoi(m[3].str());
    ASSERT_LT(rank, nproc);
    EXPECT_EQ(i, next_err[rank]);
    next_err[rank] = i + every;
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(r.out_lines().size(), static_cast<size_t>(nproc * lines));
  EXPECT_EQ(r.err_lines().size(), static_cast<size_t>(nproc * lines / every));
  for (int rank = 0; rank < nproc; ++rank) {
    EXPECT_EQ(next[rank], lines);
    EXPECT_EQ(next_err[rank], lines);
  }
}

TEST(Launch, LongLineInPiecesAndPartialLastLine) {
  RunResult r = run_ddprun({"--master-port", std::to_string(free_port()), probe_path(), "longline", "200000"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 5u);
  const std::string prefix = "[rank 0] ";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[i], prefix + std::string(65536, 'x'));
  EXPECT_EQ(lines[3], prefix + std::string(200000 - 3 * 65536, 'x'));
  EXPECT_EQ(lines[4], prefix + "tail");
  EXPECT_EQ(r.out.back(), '\n');
}

TEST(Launch, FailingRankStopsTheOthers) {
  RunResult r = run_ddprun(
      {"--nproc-per-node", "3", "--master-port", std::to_string(free_port()), probe_path(), "fail", "1", "3"}, 20);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(r.exit_code(), 3) << diag(r);
  EXPECT_NE(r.err.find("[rank 1] probe rank 1 failing with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: first failed rank: rank 1 (local rank 1, pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find(") exited with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun:   | probe rank 1 failing with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: stopped rank(s) 0, 2 with SIGTERM\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: rank(s) 0, 2 ended with signal 15 (SIGTERM)\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: exiting with code 3\n"), std::string::npos) << diag(r);
  EXPECT_EQ(r.err.find("SIGKILL"), std::string::npos) << diag(r);
}

// A rank that fails the moment it starts: ddprun stops the others while later ones may still be between
// fork() and exec(), still running ddprun's signal handlers. Their SIGTERM must not reach ddprun's own signal
// pipe, which read as "ddprun received SIGTERM": exit 143 and no restart (in 12 of 12 runs at 4 ranks before).
TEST(Launch, RankFailingAtOnceIsNotMistakenForASigtermToDdprun) {
  for (int run = 0; run < 6; ++run) {
    RunResult r = run_ddprun(
        {"--nproc-per-node", "4", "--master-port", std::to_string(free_port()), "--max-restarts", "1", "/bin/false"},
        40);
    SCOPED_TRACE("run " + std::to_string(run));
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code(), 1) << diag(r);
    EXPECT_EQ(r.err.find("received SIGTERM"), std::string::npos) << diag(r);
    EXPECT_NE(r.err.find("failed after 1 restart"), std::string::npos) << diag(r);
  }
}

TEST(Launch, FailureOnSecondNodeNamesGlobalRank) {
  RunResult r =
      run_ddprun({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", probe_path(), "fail", "3", "5"}, 20);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(r.exit_code(), 5) << diag(r);
  EXPECT_NE(r.err.find("first failed rank: rank 3 (local rank 1, pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("stopped rank(s) 2 with SIGTERM"), std::string::npos) << diag(r);
}

TEST(Launch, RankKilledBySignal) {
  RunResult r = run_ddprun(
      {"--nproc-per-node", "2", "--master-port", std::to_string(free_port()), probe_path(), "signal", "0", "9"}, 20);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_EQ(r.exit_code(), 128 + 9) << diag(r);
  EXPECT_NE(r.err.find("first failed rank: rank 0 (local rank 0, pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find(") was killed by signal 9 (SIGKILL)\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("stopped rank(s) 1 with SIGTERM"), std::string::npos) << diag(r);
}

// Takes the 1 s grace plus ~0.3 s; the deadline allows 10x that (a rank never
// killed would run its 600 s sleep).
TEST(Launch, RankIgnoringSigtermIsKilledAfterGrace) {
  RunResult r = run_ddprun({"--nproc-per-node", "2", "--kill-grace", "1", "--master-port", std::to_string(free_port()),
                            probe_path(), "ignore-term", "0", "4"},
                           30);
  EXPECT_EQ(r.exit_code(), 4) << diag(r);
  EXPECT_GE(r.seconds, 1.0);
  EXPECT_LT(r.seconds, 15.0);
  EXPECT_NE(r.out.find("[rank 1] got SIGTERM, ignoring it\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("stopped rank(s) 1 with SIGTERM\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("killed rank(s) 1 with SIGKILL after the 1 s grace period\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: rank(s) 1 ended with signal 9 (SIGKILL)\n"), std::string::npos) << diag(r);
}

// Takes ddprun's 2 s wait for the output; the deadline allows 10x that, well
// short of the 90 s a launcher blocked on the output would take.
TEST(Launch, DescendantHoldingOutputDoesNotBlockExit) {
  // The rank exits at once, but a child it started keeps its stdout open for 90 s.
  RunResult r = run_ddprun({"--master-port", std::to_string(free_port()), probe_path(), "orphan", "90"}, 40);
  EXPECT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_GE(r.seconds, 1.5);
  EXPECT_LT(r.seconds, 25.0);
  EXPECT_EQ(r.out, "[rank 0] parent done\n");
  EXPECT_EQ(r.err,
            "ddprun: warning: output of rank(s) 0 was still open 2 s after the rank exited (held by a "
            "process it started); stopped reading it\n");
}

class SignalToDdprun : public ::testing::TestWithParam<int> {};

TEST_P(SignalToDdprun, IsForwardedToEveryRank) {
  const int sig = GetParam();
  Launch launch({"--nproc-per-node", "2", "--master-port", std::to_string(free_port()), probe_path(), "term-report"});
  ASSERT_TRUE(launch.wait_for(
      [](const std::string& out, const std::string&) {
        return count(out, "[rank 0] ready\n") == 1 && count(out, "[rank 1] ready\n") == 1;
      },
      10));
  const double sent = now_seconds();
  launch.send_signal(sig);
  RunResult r = launch.finish(15);
  EXPECT_LT(now_seconds() - sent, 5.0);
  EXPECT_EQ(r.exit_code(), 128 + sig) << diag(r);
  const std::string got = sig == SIGINT ? "got SIGINT" : "got SIGTERM";
  EXPECT_NE(r.out.find("[rank 0] " + got + "\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.out.find("[rank 1] " + got + "\n"), std::string::npos) << diag(r);
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  EXPECT_NE(r.err.find("ddprun: received " + name + " and forwarded it to the ranks\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddprun: exiting with code " + std::to_string(128 + sig) + "\n"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(TermAndInt, SignalToDdprun, ::testing::Values(SIGTERM, SIGINT));

TEST(Launch, SecondSignalKillsAtOnce) {
  Launch launch({"--nproc-per-node", "2", "--kill-grace", "30", "--master-port", std::to_string(free_port()),
                 probe_path(), "ignore-term", "-1", "0"});
  auto count_at_least = [](const std::string& line, size_t n) {
    return [line, n](const std::string& out, const std::string&) {
      return count(out, "[rank 0] " + line + "\n") >= n && count(out, "[rank 1] " + line + "\n") >= n;
    };
  };
  ASSERT_TRUE(launch.wait_for(count_at_least("ready", 1), 10));
  launch.send_signal(SIGTERM);
  ASSERT_TRUE(launch.wait_for(count_at_least("got SIGTERM, ignoring it", 1), 10));
  const double sent = now_seconds();
  launch.send_signal(SIGTERM);
  RunResult r = launch.finish(20);
  EXPECT_LT(now_seconds() - sent, 5.0);
  EXPECT_EQ(r.exit_code(), 143) << diag(r);
  EXPECT_NE(r.err.find("ddprun: killed rank(s) 0, 1 with SIGKILL after a second SIGTERM\n"), std::string::npos)
      << diag(r);
  EXPECT_NE(r.err.find("ddprun: rank(s) 0, 1 ended with signal 9 (SIGKILL)\n"), std::string::npos) << diag(r);
}

TEST(Launch, MasterPortInUse) {
  ListeningSocket listening;
  const int port = listening.port();
  RunResult r = run_ddprun({"--nproc-per-node", "2", "--master-port", std::to_string(port), probe_path(), "env"});
  listening.close();
  EXPECT_EQ(r.exit_code(), 1) << diag(r);
  EXPECT_EQ(r.out, "");  // no rank started
  EXPECT_EQ(r.err, "ddprun: cannot use MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port) +
                       ": address already in use; pass --master-port with a free port or use --standalone\n");
}

TEST(Launch, MissingProgram) {
  RunResult r = run_ddprun({"--nproc-per-node", "2", "ddprun_no_such_program_xyz", "a"});
  EXPECT_EQ(r.exit_code(), 127);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ddprun: program 'ddprun_no_such_program_xyz' not found in PATH\n");
  r = run_ddprun({"/nonexistent/dir/prog"});
  EXPECT_EQ(r.exit_code(), 127);
  EXPECT_EQ(r.err, "ddprun: cannot run program '/nonexistent/dir/prog': No such file or directory\n");
}

TEST(Launch, ExecFailureInChildIsReported) {
  // Executable bit but not a valid executable: execve() fails with ENOEXEC.
  char path[] = "/tmp/ddprun_badexec_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "\x01\x02garbage", 9), 9);
  close(fd);
  chmod(path, 0755);
  RunResult r = run_ddprun({"--master-port", std::to_string(free_port()), path}, 20);
  unlink(path);
  EXPECT_EQ(r.exit_code(), 127) << diag(r);
  EXPECT_NE(r.err.find("[rank 0] ddprun: cannot execute '" + std::string(path) + "' for rank 0: Exec format error\n"),
            std::string::npos)
      << diag(r);
  EXPECT_NE(r.err.find("first failed rank: rank 0 (local rank 0, pid "), std::string::npos) << diag(r);
}

TEST(Launch, AllRanksSucceedSilently) {
  RunResult r =
      run_ddprun({"--nproc-per-node", "4", "--master-port", std::to_string(free_port()), probe_path(), "exit", "0"});
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST(Launch, BadOptionExits2WithOneLine) {
  RunResult r = run_ddprun({"--nproc-per-node", "two", probe_path(), "env"});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ddprun: invalid value 'two' for --nproc-per-node: expected an integer >= 1 or 'auto'\n");
  r = run_ddprun({"--nnodes", "1:4", probe_path()});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_EQ(r.err_lines().size(), 1u);
  EXPECT_NE(r.err.find("needs --rdzv-endpoint"), std::string::npos) << r.err;
  r = run_ddprun({});
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_EQ(r.err, "ddprun: missing program to run (usage: ddprun [options] program [args...])\n");
}

TEST(Launch, Help) {
  RunResult r = run_ddprun({"--help"});
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(r.out.rfind("Usage: ddprun [OPTIONS] [--] program [program args...]", 0), 0u) << r.out;
  EXPECT_EQ(r.err, "");
}
