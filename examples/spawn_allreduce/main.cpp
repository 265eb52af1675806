// ddp::spawn, the C++ torch.multiprocessing.spawn: 3 ranks started by the
// program itself (no launcher), each all_reduces rank+1 over the default group.
//
//   build/bin/spawn_allreduce
//
// prints (order of lines varies):
//   [rank 0] rank 0 of 3: sum of rank+1 = 6
//   [rank 1] rank 1 of 3: sum of rank+1 = 6
//   [rank 2] rank 2 of 3: sum of rank+1 = 6
//   all 3 ranks done
// Each rank re-executes this program; main() runs in every rank up to the
// spawn() call, which in a rank runs the lambda and exits. A rank that fails
// stops the others; spawn() then throws ddp::SpawnError with the failure
// summary, printed by run_main as "spawn_allreduce: rank -1: ddp::spawn: ..." (exit 1).
#include <ATen/ATen.h>

#include <cstdio>
#include <string>

#include "ddp/dist.h"
#include "ddp/dist/error_file.h"
#include "ddp/spawn.h"

int main(int argc, char** argv) {
  return ddp::run_main("spawn_allreduce", argc, argv, [](int, char**) {
    ddp::spawn(3, [](int rank, int world) {
      ddp::init_process_group();  // env:// from spawn's environment, as under ddprun
      at::Tensor t = at::full({1}, rank + 1, at::kLong);
      ddp::all_reduce(t);
      const long long sum = t.item<int64_t>();
      std::printf("rank %d of %d: sum of rank+1 = %lld\n", rank, world, sum);
      if (sum != 6)
        throw ddp::Error("rank " + std::to_string(rank) + ": expected the sum 6, got " + std::to_string(sum));
      ddp::destroy_process_group();
    });
    std::printf("all 3 ranks done\n");
    return 0;
  });
}
