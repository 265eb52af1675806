// A rank that dies or exits with an error must end the whole job quickly,
// with the survivors failing on a communication error instead of hanging.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

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
// allows 10x that; a job that waits for the collective timeout instead of
// failing fast takes DDP_TIMEOUT = 300 s.
constexpr double kDeadline = 40.0;
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
      if (backend == "gloo")
        EXPECT_TRUE(has(r.output, "[rank 0] caught ddp::CommError: [gloo] rank 0/"));
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

}  // namespace
