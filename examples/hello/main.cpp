// Each rank says who it is, from the launcher's environment and from the group.
//
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/hello
//
// prints (order of lines varies):
//   [rank 0] My rank is 0, same as 0
//   [rank 1] My rank is 1, same as 1
#include <cstdio>
#include <cstdlib>

#include "ddp/dist.h"

int main() try {
  const char* env_rank = std::getenv("RANK");  // set by ddprun (torchrun sets it too)
  auto group = ddp::init_process_group();
  std::printf("My rank is %s, same as %d\n", env_rank ? env_rank : "0", group->rank());
  ddp::destroy_process_group();
  return 0;
} catch (const std::exception& e) {  // uncaught, it would end in std::terminate: SIGABRT, exit 134
  std::fprintf(stderr, "hello: %s\n", e.what());
  return 1;
}
