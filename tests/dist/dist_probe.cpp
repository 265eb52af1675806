// A program for failure tests, run under ddprun:
//   dist_probe kill   the last rank SIGKILLs itself during a stream of large
//                     all_reduces; the others must get ddp::CommError.
//   dist_probe exit3  the last rank exits with code 3 after init; the others
//                     block in an all_reduce and must fail, not hang.
//   dist_probe stall  the last rank never calls the all_reduce (it sleeps 600 s);
//                     the others call it with a 500 ms timeout and must fail
//                     at that timeout, not hang.
// Surviving ranks ignore SIGTERM so that the error they print is their own,
// not the launcher's stop, and exit 17 after printing what they caught.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "ddp/dist.h"

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "exit3" && mode != "stall") {
    std::fprintf(stderr, "usage: dist_probe kill|exit3|stall\n");
    return 2;
  }
  auto g = ddp::init_process_group();
  const int last = g->size() - 1;
  if (g->rank() != last) std::signal(SIGTERM, SIG_IGN);
  if (mode == "exit3" && g->rank() == last) {
    std::fprintf(stderr, "rank %d exiting with code 3\n", last);
    std::_Exit(3);
  }
  if (mode == "stall" && g->rank() == last) {
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
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
    at::Tensor t = at::ones({1 << 22});
    for (int i = 0; i < 1000; ++i) {
      if (mode == "kill" && i == 3 && g->rank() == last) std::raise(SIGKILL);
      g->all_reduce(t);
      t.fill_(1);
    }
    std::printf("finished without error\n");
    return 0;
  } catch (const ddp::CommError& e) {
    std::fprintf(stderr, "caught ddp::CommError: %s\n", e.what());
    return 17;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caught other exception: %s\n", e.what());
    return 18;
  }
}
