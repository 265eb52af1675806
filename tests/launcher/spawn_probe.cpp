// A program that calls ddp::spawn, driven by test_spawn.cpp:
//   spawn_probe allreduce N          N ranks all_reduce rank+1 through the default group
//   spawn_probe throw N R            rank R throws, the others sleep
//   spawn_probe exit3 N R            rank R calls exit(3), the others sleep
//   spawn_probe stubborn N R         the others ignore SIGTERM and sleep, then rank R throws
//   spawn_probe nested               fn calls spawn() again
//   spawn_probe twice                spawn(1, ...) then spawn(2, ...)
//   spawn_probe async N              start_processes(N, ...), then join()
//   spawn_probe sleep N              every rank prints its pid and sleeps (the parent is killed by the test)
// The parent prints "parent: before spawn" (in every rank too: main runs up to
// spawn), "parent: spawn returned 0" on success, or "parent: SpawnError rank=R
// exit_code=C" on stdout and what() on stderr, then exits 7.
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "ddp/dist.h"
#include "ddp/spawn.h"

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

void allreduce(int rank, int world) {
  ddp::init_process_group();
  at::Tensor t = at::full({1}, rank + 1, at::kLong);
  ddp::all_reduce(t);
  std::printf("rank %d of %d (group rank %d of %d): sum %lld\n", rank, world, ddp::get_rank(), ddp::get_world_size(),
              static_cast<long long>(t.item<int64_t>()));
  ddp::destroy_process_group();
}

int run(const std::string& what, int n, int victim) {
  ddp::SpawnOptions opts;
  opts.kill_grace_s = 1;
  if (what == "allreduce") return ddp::spawn(n, allreduce, opts);
  if (what == "throw" || what == "exit3") {
    return ddp::spawn(
        n,
        [&](int rank, int) {
          if (rank != victim) {
            std::printf("rank %d waits\n", rank);
            sleep_s(600);
            return;
          }
          sleep_s(0.3);
          if (what == "exit3") std::exit(3);
          throw std::runtime_error("boom from rank " + std::to_string(rank));
        },
        opts);
  }
  if (what == "stubborn") {
    return ddp::spawn(
        n,
        [&](int rank, int) {
          if (rank != victim) ::signal(SIGTERM, SIG_IGN);
          ddp::init_process_group();
          ddp::barrier();  // every other rank ignores SIGTERM by now
          if (rank == victim) throw std::runtime_error("rank " + std::to_string(rank) + " fails");
          std::printf("rank %d ignores SIGTERM\n", rank);
          sleep_s(600);
        },
        opts);
  }
  if (what == "nested") {
    return ddp::spawn(
        2, [](int, int) { ddp::spawn(2, [](int, int) {}); }, opts);
  }
  if (what == "twice") {
    ddp::spawn(
        1, [](int rank, int world) { std::printf("first: rank %d of %d\n", rank, world); }, opts);
    std::printf("parent: between the calls\n");
    return ddp::spawn(
        2, [](int rank, int world) { std::printf("second: rank %d of %d\n", rank, world); }, opts);
  }
  if (what == "async") {
    ddp::SpawnContext ctx = ddp::start_processes(n, allreduce, opts);
    std::printf("parent: started\n");
    std::fflush(stdout);
    ctx.join();
    return 0;
  }
  if (what == "sleep") {
    return ddp::spawn(
        n,
        [](int rank, int) {
          std::printf("rank %d pid %ld sleeps\n", rank, static_cast<long>(::getpid()));
          std::fflush(stdout);
          sleep_s(600);
        },
        opts);
  }
  std::fprintf(stderr, "spawn_probe: unknown scenario '%s'\n", what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string what = argc > 1 ? argv[1] : "";
  const int n = argc > 2 ? std::atoi(argv[2]) : 2;
  const int victim = argc > 3 ? std::atoi(argv[3]) : 0;
  std::printf("parent: before spawn\n");
  try {
    int rc = run(what, n, victim);
    std::printf("parent: spawn returned %d\n", rc);
    return rc;
  } catch (const ddp::SpawnError& e) {
    std::printf("parent: SpawnError rank=%d exit_code=%d\n", e.rank(), e.exit_code());
    std::fprintf(stderr, "what: %s\n", e.what());
    return 7;
  }
}
