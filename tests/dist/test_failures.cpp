// A rank that dies or exits with an error must end the whole job quickly,
// with the survivors failing on a communication error instead of hanging.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "support/free_port.h"

namespace {

struct Result {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

Result run(const std::string& cmd) {
  auto start = std::chrono::steady_clock::now();
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::vector<std::string> backends() {
  std::vector<std::string> out;
  std::istringstream s(DDP_TEST_BACKENDS);
  std::string b;
  while (std::getline(s, b, ','))
    if (!b.empty()) out.push_back(b);
  return out;
}

std::string launch(const std::string& backend, int np, const std::string& mode) {
  return std::string(DDPRUN_PATH) + " --nproc-per-node " + std::to_string(np) +
         " --standalone --kill-grace 30 --backend " + backend + " " + DIST_PROBE_PATH + " " + mode;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// A run takes 2-4 s on an idle machine (mpirun and init included). The deadline
// allows 10x that (times DDP_TEST_SLOWDOWN in sanitizer builds); a job that waits
// for the collective timeout instead of failing fast takes DDP_TIMEOUT = 300 s.
constexpr double kSlowdown = DDP_TEST_SLOWDOWN;
constexpr double kDeadline = 40.0 * kSlowdown;
const std::string kTimeout = "DDP_TIMEOUT=300 ";

TEST(Failures, KilledRankMakesSurvivorsThrowCommError) {
  for (const auto& backend : backends()) {
    for (int np : {2, 3}) {
      Result r = run(kTimeout + launch(backend, np, "kill"));
      std::string last = std::to_string(np - 1);
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + "\n" + r.output);
      EXPECT_NE(r.exit_code, 0);
      EXPECT_LT(r.seconds, kDeadline);
      EXPECT_TRUE(has(r.output, "rank " + last)) << "the summary names the killed rank";
      EXPECT_TRUE(has(r.output, "signal 9")) << "the summary names the signal";
      EXPECT_FALSE(has(r.output, "finished without error"));
      if (backend == "gloo") {
        // Survivors fail on their own, within seconds, naming backend, rank and op
        // (mpirun stops an MPI job itself when a rank dies).
        EXPECT_TRUE(has(r.output, "[rank 0] caught ddp::CommError: [gloo] rank 0/" + std::to_string(np) +
                                      " all_reduce: communication failed"));
      }
    }
  }
}

TEST(Failures, RankExitingWithCodeThreeEndsTheJob) {
  for (const auto& backend : backends()) {
    for (int np : {2, 3}) {
      Result r = run(kTimeout + launch(backend, np, "exit3"));
      std::string last = std::to_string(np - 1);
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + "\n" + r.output);
      EXPECT_NE(r.exit_code, 0);
      EXPECT_LT(r.seconds, kDeadline);
      EXPECT_TRUE(has(r.output, "rank " + last));
      EXPECT_TRUE(has(r.output, "exit code 3") || has(r.output, "code 3"));
      if (backend == "gloo") EXPECT_TRUE(has(r.output, "[rank 0] caught ddp::CommError: [gloo] rank 0/"));
    }
  }
}

// A rank that never joins a collective: the others fail at the call's timeout.
// gloo throws ddp::TimeoutError; mpi runs a blocking call on the caller's
// thread, which MPI cannot abandon, so the process says so and exits 1.
TEST(Failures, CollectiveTimeoutEndsTheJob) {
  for (const auto& backend : backends()) {
    for (int np : {2, 3}) {
      Result r = run(kTimeout + launch(backend, np, "stall"));
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + "\n" + r.output);
      EXPECT_NE(r.exit_code, 0);
      EXPECT_LT(r.seconds, kDeadline);
      EXPECT_FALSE(has(r.output, "finished without error"));
      // The first waiting rank to time out ends the job, and under load it may
      // end it before the others time out: one of them must have said so.
      bool reported = false;
      for (int rank = 0; rank + 1 < np; ++rank) {
        const std::string who = "[" + backend + "] rank " + std::to_string(rank) + "/" + std::to_string(np) +
                                " all_reduce: timed out after 500 ms";
        reported |= backend == "gloo"
                        ? has(r.output, "[rank " + std::to_string(rank) + "] caught ddp::CommError: " + who)
                        : has(r.output, who + ", blocked in MPI on the calling thread");
      }
      EXPECT_TRUE(reported) << "no waiting rank reported its timeout";
    }
  }
}

// --- Rank-side fault detection: heartbeat, job id, DDP_DEBUG=DETAIL ---

std::string launch_on(const std::string& backend, int np, const std::string& args, const std::string& extra = "") {
  return std::string(DDPRUN_PATH) + " --nproc-per-node " + std::to_string(np) + " --standalone --kill-grace 2 " +
         extra + "--backend " + backend + " " + DIST_PROBE_PATH + " " + args;
}
std::string gloo_launch(int np, const std::string& args, const std::string& extra = "") {
  return launch_on("gloo", np, args, extra);
}

using ddp::test::free_port;

// A SIGSTOPped rank (not rank 0) no longer beats: with a heartbeat timeout of
// 2 s, the others end within seconds (not at DDP_TIMEOUT = 300 s), naming it.
// gloo beats through rank 0's store, mpi with MPI messages of its own.
TEST(Heartbeat, StoppedRankIsNamedWithinTheTimeout) {
  for (const auto& backend : backends()) {
    for (int np : {2, 3, 4}) {
      const int stopped = np - 1;
      Result r = run("DDP_HEARTBEAT_TIMEOUT=2 " + kTimeout + launch_on(backend, np, "stop " + std::to_string(stopped)));
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + "\n" + r.output);
      EXPECT_NE(r.exit_code, 0);
      EXPECT_LT(r.seconds, kDeadline);
      EXPECT_FALSE(has(r.output, "finished without error"));
      // ddprun (the stopped rank's parent, or mpirun's) sees the stop and acts at the same timeout as the
      // survivors' heartbeat; whichever is first, the headline names the stopped rank: ddprun's own "was
      // stopped", or the survivor's lost heartbeat, which names the silent rank (a PeerFailure), never the survivor.
      const std::string s = std::to_string(stopped);
      EXPECT_TRUE(has(r.output, "ddprun: root cause: rank " + s + " (pid ") ||
                  has(r.output, "ddprun: root cause: rank " + s + ", named by rank "))
          << "the headline does not name the stopped rank";
      EXPECT_FALSE(has(r.output, "ddprun: root cause: rank 0 (pid")) << "a survivor was blamed";
    }
  }
}

// The same under a bare mpirun, where no ddprun watches the ranks: only the survivors' heartbeat (MPI messages
// on a communicator of its own, beside a survivor blocked in MPI_Allreduce) sees the stop, and ends the job.
TEST(Heartbeat, MpiStoppedRankIsNamedByItsPeers) {
  const auto all = backends();
  if (std::find(all.begin(), all.end(), "mpi") == all.end()) GTEST_SKIP() << "no mpi backend in this build";
  for (int np : {2, 3}) {
    const int stopped = np - 1;
    Result r = run(std::string("mpirun -np ") + std::to_string(np) + " --oversubscribe --bind-to none " +
                   (geteuid() == 0 ? "--allow-run-as-root " : "") + "-x DDP_HEARTBEAT_TIMEOUT=2 -x DDP_TIMEOUT=300 " +
                   DIST_PROBE_PATH + " stop " + std::to_string(stopped));
    SCOPED_TRACE("np=" + std::to_string(np) + "\n" + r.output);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.seconds, kDeadline);
    EXPECT_FALSE(has(r.output, "finished without error"));
    bool named = false;
    for (int rank = 0; rank < stopped; ++rank)
      named |= has(r.output, "[mpi] rank " + std::to_string(rank) + "/" + std::to_string(np) + ": rank " +
                                 std::to_string(stopped) +
                                 " stopped answering: no heartbeat for 2 s "
                                 "(DDP_HEARTBEAT_TIMEOUT); ending this rank");
    EXPECT_TRUE(named) << "no survivor named the stopped rank";
  }
}

// The ending rank writes its TORCHELASTIC_ERROR_FILE (JSON). Two ranks started by hand (ddprun would also see
// the SIGSTOP and might end the job first): rank 1 stops itself, rank 0's heartbeat ends it.
TEST(Heartbeat, EndingRankWritesTheErrorFile) {
  char dir[] = "/tmp/ddp-error-files-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/error-rank0.json";
  const std::string env = "DDP_HEARTBEAT_TIMEOUT=2 " + kTimeout +
                          "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                          " WORLD_SIZE=2 DDP_BACKEND=gloo ";
  Result r =
      run("sh -c '" + env + "RANK=1 " + DIST_PROBE_PATH + " stop 1 & p=$!; " + env +
          "RANK=0 TORCHELASTIC_ERROR_FILE=" + path + " " + DIST_PROBE_PATH + " stop 1; rc=$?; kill -9 $p; exit $rc'");
  SCOPED_TRACE(r.output);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, kDeadline);
  FILE* f = fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr) << path;
  char buf[4096] = {0};
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  std::system((std::string("rm -rf ") + dir).c_str());
  std::string json(buf, n);
  EXPECT_TRUE(has(json,
                  "\"message\":\"[gloo] rank 0/2: rank 1 stopped answering: no heartbeat for 2 s "
                  "(DDP_HEARTBEAT_TIMEOUT); ending this rank\""))
      << json;
  EXPECT_TRUE(has(json, "\"rank\":0,") && has(json, "\"exit_code\":1,") && has(json, "\"timestamp_us\":")) << json;
}

// A SIGSTOPped rank 0 stops its store too: the others' store calls go
// unanswered, and they end naming rank 0 and the store's address.
TEST(Heartbeat, StoppedRankZeroIsNamedThroughItsStore) {
  for (int np : {2, 3}) {
    Result r = run("DDP_HEARTBEAT_TIMEOUT=2 " + kTimeout + gloo_launch(np, "stop 0"));
    SCOPED_TRACE("np=" + std::to_string(np) + "\n" + r.output);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.seconds, kDeadline);
    // A survivor's heartbeat, or ddprun (rank 0's parent, which sees the stop too), names rank 0.
    bool by_survivor = false;
    for (int rank = 1; rank < np; ++rank)
      by_survivor |= has(r.output, "[rank " + std::to_string(rank) + "] [gloo] rank " + std::to_string(rank) + "/" +
                                       std::to_string(np) + ": rank 0 stopped answering: its store at 127.0.0.1:");
    EXPECT_TRUE(by_survivor || has(r.output, "ddprun: root cause: rank 0 (pid ")) << "nobody named rank 0";
    if (by_survivor) EXPECT_TRUE(has(r.output, "gave no reply for 2 s (DDP_HEARTBEAT_TIMEOUT); ending this rank"));
  }
}

// Ranks that end normally at different times (one sleeps 3 s, three heartbeat
// timeouts, before destroying its group) are not reported: done marks.
// The sleeper is rank 0 (the store's host) in odd worlds, the last rank in even ones.
TEST(Heartbeat, RanksFinishingAtDifferentTimesAreNotReported) {
  for (const auto& backend : backends()) {
    for (int np : {1, 2, 3, 4}) {
      const int sleeper = np % 2 == 1 ? 0 : np - 1;
      Result r =
          run("DDP_HEARTBEAT_TIMEOUT=1 " + kTimeout + launch_on(backend, np, "stagger " + std::to_string(sleeper)));
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + " sleeper=" + std::to_string(sleeper) + "\n" + r.output);
      EXPECT_EQ(r.exit_code, 0);
      EXPECT_LT(r.seconds, kDeadline);
      EXPECT_FALSE(has(r.output, "stopped answering"));
      for (int rank = 0; rank < np; ++rank)
        EXPECT_TRUE(has(r.output, "rank " + std::to_string(rank) + " finished without error"));
    }
  }
}

// A synchronous collective waiting longer than DDP_WAIT_REPORT_INTERVAL says
// what it waits for; the late rank still beats, so no heartbeat is late.
TEST(Heartbeat, LongWaitIsReported) {
  for (const auto& backend : backends()) {
    for (int np : {2, 3}) {
      Result r = run("DDP_WAIT_REPORT_INTERVAL=1 " + kTimeout + launch_on(backend, np, "slow"));
      SCOPED_TRACE(backend + " np=" + std::to_string(np) + "\n" + r.output);
      EXPECT_EQ(r.exit_code, 0);
      // "waiting for 1.4 s": the monitor looks every 0.5 s.
      EXPECT_TRUE(
          has(r.output, "[rank 0] [" + backend + "] rank 0/" + std::to_string(np) + " all_reduce: waiting for "));
      EXPECT_TRUE(has(r.output, " s in collective #1 (3.9 KiB; timeout 300 s); every peer's heartbeat is current"));
    }
  }
}

// Nothing listens at the master address: the rank says every interval what it
// waits for and why, then fails with ddp::Error at DDP_TIMEOUT (0.5 s: not "0 s") or
// DDP_RDZV_TIMEOUT, exit 1. A name that does not resolve is named as such.
TEST(InitRendezvous, UnreachableMasterFailsClearlyAtTheTimeout) {
  const std::string port = std::to_string(free_port());
  const std::string env = "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.2 MASTER_PORT=" + port + " ";
  Result r = run(env + "DDP_TIMEOUT=0.5 " + DIST_PROBE_PATH + " sum");
  SCOPED_TRACE(r.output);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.seconds, 10.0 * kSlowdown);
  EXPECT_TRUE(has(r.output, "ddp::Error: [gloo] rank 1/2 init: cannot reach rank 0's store at 127.0.0.2:" + port +
                                " within 0.5 s (DDP_TIMEOUT): connections are refused: nothing listens on port " +
                                port +
                                " there (yet). Is rank 0 running, and are MASTER_ADDR and MASTER_PORT the "
                                "ones it was given? (to wait longer for a rank 0 that starts late: ddprun "
                                "--rdzv-timeout SECONDS, or DDP_RDZV_TIMEOUT)"));
  // The first-contact deadline apart from the collectives' (DDP_TIMEOUT 600 s here).
  Result slow = run(env + "DDP_TIMEOUT=600 DDP_RDZV_TIMEOUT=3 DDP_WAIT_REPORT_INTERVAL=1 " + DIST_PROBE_PATH + " sum");
  SCOPED_TRACE(slow.output);
  EXPECT_EQ(slow.exit_code, 1);
  EXPECT_LT(slow.seconds, 30.0 * kSlowdown);
  EXPECT_TRUE(has(slow.output, "[gloo] rank 1/2 init: waiting for rank 0's store at 127.0.0.2:" + port + ": "));
  EXPECT_TRUE(has(slow.output, " of 3 s (DDP_RDZV_TIMEOUT): connections are refused"));
  EXPECT_TRUE(has(slow.output, "within 3 s (DDP_RDZV_TIMEOUT)"));
  // With the default report interval (30 s), the first line comes after 5 s: what is tried shows at once.
  Result first = run(env + "DDP_RDZV_TIMEOUT=8 " + DIST_PROBE_PATH + " sum");
  SCOPED_TRACE(first.output);
  EXPECT_EQ(first.exit_code, 1);
  size_t waiting = 0;
  for (size_t at = first.output.find("waiting for rank 0's store"); at != std::string::npos;
       at = first.output.find("waiting for rank 0's store", at + 1))
    ++waiting;
  EXPECT_EQ(waiting, 1u);
  EXPECT_TRUE(has(first.output, "init: waiting for rank 0's store at 127.0.0.2:" + port + ": 5"));
  EXPECT_TRUE(has(first.output, " of 8 s (DDP_RDZV_TIMEOUT): connections are refused"));
  Result unknown = run("RANK=1 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=" + port +
                       " DDP_RDZV_TIMEOUT=1 " + DIST_PROBE_PATH + " sum");
  SCOPED_TRACE(unknown.output);
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(has(unknown.output, "cannot reach rank 0's store at no-such-host.invalid:" + port +
                                      " within 1 s (DDP_RDZV_TIMEOUT): 'no-such-host.invalid' does not resolve to "
                                      "an address ("));
}

// Two jobs started at once on one --master-port: the one whose rank 0 listens
// first finishes with the right sums; the other fails with a clear message
// (its rank 0 cannot listen, or its rank 1 is refused by the other job's
// store), never a hang, never a broken first job.
TEST(InitRendezvous, TwoJobsOnOnePortNeverDisturbEachOther) {
  int collisions = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const std::string port = std::to_string(free_port());
    auto cmd = [&](const char* id) {
      return "DDP_TIMEOUT=60 " + std::string(DDPRUN_PATH) + " --nproc-per-node 2 --master-port " + port +
             " --kill-grace 2 --rdzv-id " + id + " --backend gloo " + DIST_PROBE_PATH + " sum 2>&1";
    };
    auto start = std::chrono::steady_clock::now();
    FILE* a = popen(cmd("job-a").c_str(), "r");
    FILE* b = popen(cmd("job-b").c_str(), "r");
    Result ra, rb;
    for (auto [p, res] : {std::pair{a, &ra}, std::pair{b, &rb}}) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), p)) > 0) res->output.append(buf, n);
      int status = pclose(p);
      res->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    SCOPED_TRACE("trial " + std::to_string(trial) + "\njob a:\n" + ra.output + "\njob b:\n" + rb.output);
    EXPECT_LT(seconds, kDeadline);
    int ok = 0;
    for (Result* res : {&ra, &rb}) {
      if (res->exit_code == 0) {
        ++ok;
        EXPECT_TRUE(has(res->output, "[rank 0] sum=3") && has(res->output, "[rank 1] sum=3"));
        continue;
      }
      ++collisions;
      const bool refused = has(res->output, "belongs to job 'job-") &&
                           has(res->output, "another job is using MASTER_PORT " + port + "; choose another port");
      EXPECT_TRUE(refused || has(res->output, "address already in use")) << "an unclear failure";
    }
    EXPECT_GE(ok, 1) << "the first job must finish";
  }
  std::printf("jobs that lost the port in 5 trials: %d\n", collisions);
}

// Ranks calling different collectives across processes, every backend, with the default check (a hash) and under
// DDP_DEBUG=DETAIL: rank 0 reduces 8 floats, the others 66902; every rank throws naming the views, no abort
// (a world of one: fine).
TEST(Agreement, MismatchIsNamedAcrossProcesses) {
  for (const std::string level : {"", "DDP_DEBUG=DETAIL "}) {
    for (const auto& backend : backends()) {
      for (int np : {1, 2, 3}) {
        Result r = run(level + kTimeout + std::string(DDPRUN_PATH) + " --nproc-per-node " + std::to_string(np) +
                       " --standalone --backend " + backend + " " + DIST_PROBE_PATH + " mismatch");
        SCOPED_TRACE(level + backend + " np=" + std::to_string(np) + "\n" + r.output);
        EXPECT_LT(r.seconds, kDeadline);
        if (np == 1) {
          EXPECT_EQ(r.exit_code, 0);
          continue;
        }
        EXPECT_NE(r.exit_code, 0);
        EXPECT_FALSE(has(r.output, "terminate called")) << "aborted";
        EXPECT_TRUE(has(r.output, "[rank 0] caught other exception: [" + backend + "] rank 0/" + std::to_string(np) +
                                      " all_reduce: ranks disagree on collective #1: rank 0: #1 all_reduce "
                                      "float32[8] SUM; rank 1: #1 all_reduce float32[66902] SUM"));
      }
    }
  }
}

}  // namespace
