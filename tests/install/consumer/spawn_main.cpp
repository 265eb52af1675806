// Uses the installed ddp::spawn: 2 ranks all_reduce rank+1 (sum 3), each checks it.
#include <ATen/ATen.h>
#include <ddp/dist.h>
#include <ddp/spawn.h>

#include <cstdio>

int main() {
  try {
    ddp::spawn(2, [](int rank, int) {
      ddp::init_process_group();
      at::Tensor t = at::full({1}, rank + 1, at::kLong);
      ddp::all_reduce(t);
      if (t.item<int64_t>() != 3) throw ddp::Error("expected the sum 3");
      ddp::destroy_process_group();
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_spawn: %s\n", e.what());
    return 1;
  }
  std::printf("consumer_spawn: 2 ranks, sum 3\n");
  return 0;
}
