// Each rank says who it is, from the launcher's environment and from the group.
//
//   build/bin/ddprun --nproc-per-node 2 --standalone build/bin/hello
//   build/bin/ddprun --nproc-per-node 2 --standalone --backend mpi build/bin/hello
//
// prints (order of lines varies):
//   [rank 0] My rank is 0, same as 0
//   [rank 1] My rank is 1, same as 1
// An error (e.g. at init) is printed as "hello: rank R: ..." and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/dist.h"
#include "ddp/dist/error_file.h"

namespace {

// The launcher's rank: RANK from ddprun/torchrun, OMPI_COMM_WORLD_RANK from mpirun.
std::string launcher_rank() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "0";  // no launcher: a world of one
}

}  // namespace

int main(int argc, char** argv) {
  return ddp::run_main("hello", argc, argv, [](int, char**) {
    auto group = ddp::init_process_group();
    std::printf("My rank is %s, same as %d\n", launcher_rank().c_str(), group->rank());
    ddp::destroy_process_group();
    return 0;
  });
}
