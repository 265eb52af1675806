// A program for failure tests, run under ddprun:
//   dist_probe kill   the last rank SIGKILLs itself during a stream of large
//                     all_reduces; the others must get ddp::CommError.
//   dist_probe exit3  the last rank exits with code 3 after init; the others
//                     block in an all_reduce and must fail, not hang.
// Surviving ranks ignore SIGTERM so that the error they print is their own,
// not the launcher's stop, and exit 17 after printing what they caught.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "ddp/dist.h"

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "exit3") {
    std::fprintf(stderr, "usage: dist_probe kill|exit3\n");
    return 2;
  }
  auto g = ddp::init_process_group();
  const int last = g->size() - 1;
  if (g->rank() != last) std::signal(SIGTERM, SIG_IGN);
  if (mode == "exit3" && g->rank() == last) {
    std::fprintf(stderr, "rank %d exiting with code 3\n", last);
    std::_Exit(3);
  }
  try {
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
