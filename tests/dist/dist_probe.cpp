// A program for failure tests, run under ddprun:
//   dist_probe kill   the last rank SIGKILLs itself during a stream of large
//                     all_reduces; the others must get ddp::CommError.
//   dist_probe exit3  the last rank exits with code 3 after init; the others
//                     block in an all_reduce and must fail, not hang.
//   dist_probe stall  the last rank never calls the all_reduce (it sleeps 600 s);
//                     the others call it with a 500 ms timeout and must fail
//                     at that timeout, not hang.
//   dist_probe stop R     rank R SIGSTOPs itself after init; the others run
//                         all_reduces until their heartbeat ends them.
//   dist_probe stagger R  rank R sleeps 3 s before destroying its group, the
//                         others destroy theirs at once; every rank exits 0.
//   dist_probe slow   the last rank sleeps 2.5 s before an all_reduce that the
//                     others wait in (long waits get reported); all exit 0.
//   dist_probe sum    prints "sum=N", an all_reduce of rank+1; exits 0.
//   dist_probe mismatch  all_reduce of float32[8] on rank 0, of float32[66902]
//                     elsewhere (with DDP_DEBUG=DETAIL every rank throws).
//   dist_probe cost   rank 0 prints ms per all_reduce of 8 floats and of 4M
//                     floats (compare runs with and without DDP_DEBUG=DETAIL).
//   dist_probe until-restart  on the first attempt (TORCHELASTIC_RESTART_COUNT
//                     0 or unset) all_reduces of 1024 floats every 10 ms for up
//                     to 600 s, until a peer is lost; after a restart one
//                     all_reduce, prints "restarted: world W sum S", exits 0.
// Surviving ranks ignore SIGTERM (from before init) so that the error they print is their own,
// not the launcher's stop, and exit 17 after printing what they caught
// (18 for other exceptions). A ddp::Error out of init: printed, exit 1.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

#include "ddp/dist.h"

namespace {

// "at T killed": the wall clock (s) on stdout, where a test's checks of stderr do not see it.
void stamp(const char* what) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  std::printf("at %lld.%03ld %s\n", static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000000, what);
  std::fflush(stdout);
}

int run(const std::string& mode, int arg) {
  const bool failure_mode = mode == "kill" || mode == "exit3" || mode == "stall" || mode == "stop";
  // Ignored from the start: the launcher may stop the job while a survivor is still in init (the
  // last rank exits right after its own); only the last rank takes SIGTERM again, once it knows it is last.
  if (failure_mode) std::signal(SIGTERM, SIG_IGN);
  auto g = ddp::init_process_group();
  const int rank = g->rank(), last = g->size() - 1;
  if (failure_mode && rank == last) std::signal(SIGTERM, SIG_DFL);
  if (mode == "sum") {
    at::Tensor t = at::full({4}, rank + 1, at::kLong);
    g->all_reduce(t);
    std::printf("sum=%lld\n", static_cast<long long>(t[0].item<int64_t>()));
    return 0;
  }
  if (mode == "stagger") {
    at::Tensor t = at::ones({16});
    g->all_reduce(t);
    if (rank == arg) std::this_thread::sleep_for(std::chrono::seconds(3));
    g.reset();
    ddp::destroy_process_group();
    std::printf("rank %d finished without error\n", rank);
    return 0;
  }
  if (mode == "cost") {
    for (int64_t n : {int64_t(8), int64_t(1) << 22}) {
      at::Tensor t = at::ones({n});
      const int iterations = n == 8 ? 2000 : 20;
      for (int i = 0; i < 3; ++i) g->all_reduce(t);  // warm-up
      g->barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) g->all_reduce(t);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (rank == 0) std::printf("all_reduce float32[%lld]: %.4f ms\n", static_cast<long long>(n), ms / iterations);
    }
    return 0;
  }
  if (mode == "until-restart") {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    at::Tensor t = at::ones({1024});
    if (count != nullptr && std::atoi(count) > 0) {
      g->all_reduce(t);
      std::printf("restarted: world %d sum %.0f\n", g->size(), t[0].item<float>());
      return 0;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (int i = 0; i < 60000; ++i) {  // a CommError when a peer goes: exit 17 below
      g->all_reduce(t);
      t.fill_(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  if (mode == "slow") {
    if (rank == last) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    at::Tensor t = at::ones({1000});
    g->all_reduce(t);
    std::printf("finished without error\n");
    return 0;
  }
  if (mode == "exit3" && rank == last) {
    std::fprintf(stderr, "rank %d exiting with code 3\n", last);
    std::_Exit(3);
  }
  if (mode == "stall" && rank == last) {
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
  }
  if (mode == "stop") {
    at::Tensor t = at::ones({16});
    g->all_reduce(t);  // every rank's heartbeat has started
    if (rank == arg) {
      std::fprintf(stderr, "rank %d stopping itself\n", rank);
      std::raise(SIGSTOP);
    }
  }
  try {
    if (mode == "stall") {
      at::Tensor t = at::ones({1000});
      ddp::AllReduceOptions o;
      o.timeout = std::chrono::milliseconds(500);
      g->all_reduce(t, o);
      std::printf("finished without error\n");
      return 0;
    }
    if (mode == "mismatch") {
      at::Tensor t = at::ones({rank == 0 ? 8 : 66902});
      g->all_reduce(t);
      std::printf("finished without error\n");
      return 0;
    }
    at::Tensor t = at::ones({mode == "stop" ? 1024 : 1 << 22});
    const int iterations = mode == "stop" ? 1000000 : 1000;
    for (int i = 0; i < iterations; ++i) {
      if (mode == "kill" && i == 3 && rank == last) {
        stamp("killed");  // bench/dead_rank.sh: from here to the survivors' error and the job's end
        std::raise(SIGKILL);
      }
      g->all_reduce(t);
      t.fill_(1);
    }
    std::printf("finished without error\n");
    return 0;
  } catch (const ddp::CommError& e) {
    stamp("caught");
    std::fprintf(stderr, "caught ddp::CommError: %s\n", e.what());
    return 17;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caught other exception: %s\n", e.what());
    return 18;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* modes[] = {"kill", "exit3", "stall",    "stop", "stagger",
                         "slow", "sum",   "mismatch", "cost", "until-restart"};
  bool known = false;
  for (const char* m : modes) known = known || mode == m;
  const bool needs_rank = mode == "stop" || mode == "stagger";
  if (!known || (needs_rank && argc < 3)) {
    std::fprintf(stderr,
                 "usage: dist_probe kill|exit3|stall|slow|sum|mismatch|cost|until-restart | stop R | stagger R\n");
    return 2;
  }
  try {
    return run(mode, needs_rank ? std::atoi(argv[2]) : -1);
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddp::Error: %s\n", e.what());
    return 1;
  }
}
