// Uses the installed headers and libraries (one program: each file costs a compile of LibTorch's headers):
//   consumer        a world of one, one all_reduce, a schedule (ddp::ddp)
//   consumer spawn  ddp::spawn: 2 ranks all_reduce rank+1 (sum 3), each checks it (ddp::spawn)
// Both check that std::filesystem binds to libstdc++, not to LibTorch's copies (ddp::torch's link order).
#include <ATen/ATen.h>
#include <ddp/ddp.h>
#include <ddp/spawn.h>
#include <ddp/train.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace {

bool std_from_libstdcxx() {
  using RemoveAll = std::uintmax_t (*)(const std::filesystem::path&);
  RemoveAll fn = &std::filesystem::remove_all;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(fn), &info) != 0 && info.dli_fname && std::strstr(info.dli_fname, "libstdc++.so"))
    return true;
  std::fprintf(stderr, "consumer: std::filesystem::remove_all binds to %s, not libstdc++\n",
               info.dli_fname ? info.dli_fname : "(unknown)");
  return false;
}

int spawned() {
  try {
    ddp::spawn(2, [](int rank, int) {
      ddp::init_process_group();
      at::Tensor t = at::full({1}, rank + 1, at::kLong);
      ddp::all_reduce(t);
      if (t.item<int64_t>() != 3) throw ddp::Error("expected the sum 3");
      ddp::destroy_process_group();
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer spawn: %s\n", e.what());
    return 1;
  }
  std::printf("consumer spawn: 2 ranks, sum 3\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!std_from_libstdcxx()) return 1;
  if (argc > 1 && std::strcmp(argv[1], "spawn") == 0) return spawned();
  auto g = ddp::init_process_group();
  at::Tensor t = at::full({4}, 3.0);
  g->all_reduce(t);
  std::printf("consumer: %s world %d, sum %.1f\n", g->backend().c_str(), g->size(), t.sum().item<double>());
  const double lr = ddp::train::LrSchedule::parse("cosine")(0, 10);  // the training layer links too
  return t.sum().item<double>() == 12.0 && lr == 1.0 ? 0 : 1;
}
