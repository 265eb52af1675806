// ddp::spawn (include/ddp/spawn.h): spawn_probe runs the scenarios in its own
// processes; the argument checks run here, before anything is started.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "ddp/spawn.h"
#include "launcher_test_util.h"

using namespace ddprun_test;

namespace {

Program probe() { return Program{SPAWN_PROBE_PATH}; }

// Runs spawn_probe with args; the deadline (runs take 2-10 s on a busy 2-core machine) only detects hangs.
RunResult run_probe(const std::vector<std::string>& args, double timeout_s = 200) {
  Launch launch(probe(), args);
  return launch.finish(timeout_s);
}

std::string sum_line(int rank, int world) {
  return "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + " of " + std::to_string(world) +
         " (group rank " + std::to_string(rank) + " of " + std::to_string(world) + "): sum " +
         std::to_string(world * (world + 1) / 2) + "\n";
}

class SpawnAllReduce : public ::testing::TestWithParam<int> {};

TEST_P(SpawnAllReduce, ExactSumOnEveryRank) {
  const int n = GetParam();
  RunResult r = run_probe({"allreduce", std::to_string(n)});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(count(r.out, sum_line(rank, n)), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "parent: spawn returned 0\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "] parent: spawn returned"), 0u) << "a rank returned from spawn()\n" << diag(r);
  // main() runs up to spawn() in the parent and in every rank.
  EXPECT_EQ(count(r.out, "parent: before spawn\n"), static_cast<size_t>(n + 1)) << diag(r);
  EXPECT_EQ(r.err, "") << diag(r);
}

INSTANTIATE_TEST_SUITE_P(Worlds, SpawnAllReduce, ::testing::Values(1, 2, 3, 4));

TEST(Spawn, RankThatThrowsIsReportedAndStopsTheOthers) {
  RunResult r = run_probe({"throw", "3", "1"});
  ASSERT_EQ(r.exit_code(), 7) << diag(r);
  EXPECT_EQ(count(r.out, "parent: SpawnError rank=1 exit_code=1\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.err, "[rank 1] ddp::spawn: rank 1: boom from rank 1\n"), 1u) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: root cause: rank 1 (pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: first failed rank: rank 1 (local rank 1, pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: stopped rank(s) 0, 2 with SIGTERM\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: throwing ddp::SpawnError, exit code 1\n"), std::string::npos) << diag(r);
  // what() starts with the failed rank and carries the summary.
  EXPECT_NE(r.err.find("what: ddp::spawn: rank 1 failed (exit code 1)\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("  | ddp::spawn: rank 1: boom from rank 1\n"), std::string::npos) << diag(r);
  EXPECT_LT(r.seconds, 120) << "the sleeping ranks (600 s) were not stopped\n" << diag(r);
}

TEST(Spawn, RankThatExitsWithCode3IsReported) {
  RunResult r = run_probe({"exit3", "2", "1"});
  ASSERT_EQ(r.exit_code(), 7) << diag(r);
  EXPECT_EQ(count(r.out, "parent: SpawnError rank=1 exit_code=3\n"), 1u) << diag(r);
  EXPECT_NE(r.err.find("first failed rank: rank 1 (local rank 1, pid "), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find(") exited with code 3\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: stopped rank(s) 0 with SIGTERM\n"), std::string::npos) << diag(r);
  EXPECT_LT(r.seconds, 120) << "the sleeping rank (600 s) was not stopped\n" << diag(r);
}

TEST(Spawn, RanksIgnoringSigtermAreKilledAfterTheGrace) {
  // Rank 0 fails after 0.5 s; ranks 1 and 2 ignore SIGTERM: SIGKILL after the 1 s grace.
  RunResult r = run_probe({"stubborn", "3", "0"});
  ASSERT_EQ(r.exit_code(), 7) << diag(r);
  EXPECT_EQ(count(r.out, "parent: SpawnError rank=0 exit_code=1\n"), 1u) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: killed rank(s) 1, 2 with SIGKILL after the 1 s grace period\n"), std::string::npos)
      << diag(r);
  EXPECT_LT(r.seconds, 120) << "SIGKILL after the 1 s grace, not the ranks' 600 s sleep\n" << diag(r);
}

TEST(Spawn, NestedCallIsAnError) {
  RunResult r = run_probe({"nested"});
  ASSERT_EQ(r.exit_code(), 7) << diag(r);
  EXPECT_NE(r.err.find("nested call: spawn() was called inside fn, in rank "), std::string::npos) << diag(r);
  EXPECT_EQ(count(r.out, "parent: SpawnError rank="), 1u) << diag(r);
}

TEST(Spawn, RanksOfTheSecondCallSkipTheFirst) {
  RunResult r = run_probe({"twice"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "first: rank"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "[rank 0] first: rank 0 of 1\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "[rank 0] second: rank 0 of 2\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "[rank 1] second: rank 1 of 2\n"), 1u) << diag(r);
  EXPECT_EQ(count(r.out, "parent: spawn returned 0\n"), 1u) << diag(r);
}

TEST(Spawn, StartProcessesRunsUntilJoin) {
  RunResult r = run_probe({"async", "3"});
  ASSERT_EQ(r.exit_code(), 0) << diag(r);
  EXPECT_EQ(count(r.out, "parent: started\n"), 1u) << diag(r);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(count(r.out, sum_line(rank, 3)), 1u) << diag(r);
}

TEST(Spawn, RanksDieWithTheParent) {
  Launch launch(probe(), {"sleep", "3"});
  ASSERT_TRUE(
      launch.wait_for([](const std::string& out, const std::string&) { return count(out, " sleeps\n") == 3; }, 120));
  launch.send_signal(SIGKILL);
  RunResult r = launch.finish(30);
  std::map<int, pid_t> pids;
  static const std::regex re(R"(\[rank (\d+)\] rank \d+ pid (\d+) sleeps)");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), re); it != std::sregex_iterator(); ++it)
    pids[std::stoi((*it)[1].str())] = static_cast<pid_t>(std::stol((*it)[2].str()));
  ASSERT_EQ(pids.size(), 3u) << diag(r);
  const double deadline = now_seconds() + 10;  // PR_SET_PDEATHSIG acts at once
  for (const auto& kv : pids) {
    while (!gone(kv.second) && now_seconds() < deadline) ::usleep(20000);
    EXPECT_TRUE(gone(kv.second)) << "rank " << kv.first << " (pid " << kv.second << ") outlived its parent";
  }
}

TEST(Spawn, SigintToTheParentStopsTheRanksAndThrows) {
  Launch launch(probe(), {"sleep", "2"});
  ASSERT_TRUE(
      launch.wait_for([](const std::string& out, const std::string&) { return count(out, " sleeps\n") == 2; }, 120));
  launch.send_signal(SIGINT);
  RunResult r = launch.finish(120);
  ASSERT_EQ(r.exit_code(), 7) << diag(r);
  EXPECT_EQ(count(r.out, "parent: SpawnError rank=-1 exit_code=130\n"), 1u) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: received SIGINT and forwarded it to the ranks\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("ddp::spawn: rank(s) 0, 1 ended with signal 2 (SIGINT)\n"), std::string::npos) << diag(r);
  EXPECT_NE(r.err.find("what: ddp::spawn: failed (exit code 130)\n"), std::string::npos) << diag(r);
}

// Argument checks: nothing is started (they run in this test process).
template <typename E>
void expect_error(const std::function<void()>& call, const std::string& message) {
  try {
    call();
    ADD_FAILURE() << "no exception, expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(SpawnArguments, AreCheckedWithClearErrors) {
  auto fn = [](int, int) {};
  using ddp::InvalidArgument;
  expect_error<InvalidArgument>([&] { ddp::spawn(0, fn); }, "ddp::spawn: nprocs must be >= 1 (got 0)");
  expect_error<InvalidArgument>([&] { ddp::spawn(-2, fn); }, "ddp::spawn: nprocs must be >= 1 (got -2)");
  expect_error<InvalidArgument>([&] { ddp::spawn(2, nullptr); },
                                "ddp::spawn: fn is empty: pass the function each rank runs, fn(rank, world)");
  expect_error<InvalidArgument>([&] { ddp::start_processes(0, fn); }, "ddp::spawn: nprocs must be >= 1 (got 0)");
  ddp::SpawnOptions o;
  o.backend = "mpi";
  expect_error<InvalidArgument>([&] { ddp::spawn(2, fn, o); },
                                "ddp::spawn: backend 'mpi' is not supported: MPI ranks are started by mpirun; launch "
                                "the program with 'ddprun --backend mpi' instead, or use backend 'gloo'");
  o.backend = "nccl";
  expect_error<InvalidArgument>([&] { ddp::spawn(2, fn, o); },
                                "ddp::spawn: unknown backend 'nccl': expected 'gloo' or 'auto'");
  o = {};
  o.master_port = 70000;
  expect_error<InvalidArgument>([&] { ddp::spawn(2, fn, o); },
                                "ddp::spawn: master_port must be 0 (a free port) or 1..65535 (got 70000)");
  o = {};
  o.timeout_s = -1;
  expect_error<InvalidArgument>(
      [&] { ddp::spawn(2, fn, o); },
      "ddp::spawn: timeout_s must be a number of seconds >= 0 (0: inherited DDP_TIMEOUT), got -1");
  o = {};
  o.kill_grace_s = std::nan("");
  expect_error<InvalidArgument>([&] { ddp::spawn(2, fn, o); },
                                "ddp::spawn: kill_grace_s must be a number of seconds >= 0, got nan");
  o = {};
  o.master_addr = "";
  expect_error<InvalidArgument>([&] { ddp::spawn(2, fn, o); }, "ddp::spawn: master_addr is empty (e.g. 127.0.0.1)");
  EXPECT_FALSE(ddp::is_spawned_child());
}

TEST(SpawnArguments, PortInUseIsAnError) {
  ListeningSocket busy;
  ddp::SpawnOptions o;
  o.master_port = busy.port();
  expect_error<ddp::Error>(
      [&] {
        ddp::spawn(
            2, [](int, int) {}, o);
      },
      "ddp::spawn: cannot use master 127.0.0.1:" + std::to_string(busy.port()) +
          ": address already in use; pass another master_port or 0 for a free one");
}

}  // namespace
