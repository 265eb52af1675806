// ddprun_error_probe: ranks that record their errors with ddp::run_main /
// ddp::record_error (TORCHELASTIC_ERROR_FILE), for the launcher's root-cause tests.
//
//   root-cause   rank 0 fails first ("Permission denied"), records it, then
//                cleans up for 30 s; rank 1 fails as soon as rank 0's error file
//                exists ("Connection reset by peer") and so exits first; other
//                ranks sleep 60 s.
//   killed       the ranks join a group (ddprun's environment); rank 1 kills itself
//                with SIGKILL, the others all_reduce until they notice it is gone.
//   throw MSG    every rank throws MSG through ddp::run_main (exit code 1).
#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "ddp/dist/error_file.h"
#include "ddp/dist/init.h"
#include "ddp/errors.h"

namespace {

int env_rank() {
  const char* r = std::getenv("RANK");
  if (r == nullptr) r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Rank 0's error file, next to ours ("...error-rank1.json" -> "...error-rank0.json").
std::string rank0_error_file() {
  const char* mine = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (mine == nullptr) return "";
  std::string path = mine;
  const std::string tag = "error-rank" + std::to_string(env_rank()) + ".json";
  size_t at = path.rfind(tag);
  return at == std::string::npos ? path : path.substr(0, at) + "error-rank0.json";
}

int root_cause() {
  const int rank = env_rank();
  if (rank == 0) {
    sleep_s(0.2);
    try {
      throw ddp::Error("cannot open /data/train.bin: Permission denied");
    } catch (const std::exception& e) {
      ddp::record_error(e);
      sleep_s(30);  // slow cleanup: ddprun stops this rank before it exits
      throw;
    }
  }
  if (rank == 1) {
    const std::string peer = rank0_error_file();
    for (int i = 0; i < 3000 && ::access(peer.c_str(), F_OK) != 0; ++i) sleep_s(0.01);
    throw ddp::Error("[gloo] rank 1/2 all_reduce: recv from rank 0: Connection reset by peer");
  }
  sleep_s(60);
  return 0;
}

int killed() {
  auto group = ddp::init_process_group();
  if (group->rank() == 1) {
    sleep_s(0.3);
    ::raise(SIGKILL);
  }
  at::Tensor t = at::ones({1024});
  for (;;) group->all_reduce(t);  // ends by an error once rank 1 is gone
}

}  // namespace

int main(int argc, char** argv) {
  return ddp::run_main("ddprun_error_probe", argc, argv, [](int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "root-cause") return root_cause();
    if (mode == "killed") return killed();
    if (mode == "throw" && argc > 2) throw ddp::Error(argv[2]);
    throw ddp::InvalidArgument("usage: ddprun_error_probe root-cause | killed | throw MSG");
  });
}
