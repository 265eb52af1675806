// exit_abort_probe held|released: a group of the nccl stand-in whose backend, as nccl's, must be let go at exit
// while its device runtime is still up (src/dist/exit_abort.h). A static holder made before the group's first call
// (as gtest's registry, or init_process_group's default group) keeps it past main() ("held"), or main() drops it
// ("released"). A stand-in runtime registers its exit handler when the device is first used, before the group's
// first call, as CUDA's does. Prints "<mode>: ok" last when, held, the group was aborted once, before that runtime
// went down and before its holder was destroyed; released, never (the group was destroyed in order). Else names
// what happened and exits 1.
#include <ATen/ATen.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/dist.h"
#include "support/nccl_standin.h"

namespace {

std::string g_mode;
int g_aborts_at_runtime_down = -1;

void fail(const std::string& what) {
  std::printf("%s: FAILED: %s\n", g_mode.c_str(), what.c_str());
  std::fflush(stdout);
  _exit(1);
}

struct Holder {
  ddp::GroupPtr group;
  ~Holder() {
    const int expected = g_mode == "held" ? 1 : 0;
    if (g_aborts_at_runtime_down != expected)
      fail("aborts when the runtime went down: " + std::to_string(g_aborts_at_runtime_down) + ", expected " +
           std::to_string(expected));
    if (ddp::testing::nccl_standin_aborts() != expected)
      fail("aborts when the holder was destroyed: " + std::to_string(ddp::testing::nccl_standin_aborts()));
    group.reset();  // held: destroyed after the runtime, already aborted
    std::printf("%s: ok\n", g_mode.c_str());
    std::fflush(stdout);
  }
};
Holder& holder() {
  static Holder h;
  return h;
}

void runtime_down() { g_aborts_at_runtime_down = ddp::testing::nccl_standin_aborts(); }

}  // namespace

int main(int argc, char** argv) {
  g_mode = argc == 2 ? argv[1] : "";
  if (g_mode != "held" && g_mode != "released") {
    std::fprintf(stderr, "usage: exit_abort_probe held|released\n");
    return 2;
  }
  holder();  // made first: destroyed after every exit handler registered from here on
  ddp::BackendOptions o;
  o.store = ddp::make_hash_store();
  o.rank = 0;
  o.world_size = 1;
  ddp::GroupPtr g = ddp::testing::make_nccl_standin(o);
  std::atexit(runtime_down);  // the device's runtime starts: its handler precedes the group's
  at::Tensor t = at::ones({4});
  g->all_reduce(t);
  if (t[0].item<float>() != 1.0f) fail("all_reduce at world 1 changed the tensor");
  if (g_mode == "held") holder().group = g;
  g.reset();
  if (ddp::testing::nccl_standin_aborts() != 0) fail("aborted before exit");
  return 0;
}
