// Backends by name. Each backend lives in its own folder and exports
// is_available() and create(BackendOptions); this registry picks one at run time.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"

namespace ddp {

struct BackendOptions {
  StorePtr store;      // rendezvous store (unused by mpi)
  int rank = 0;        // -1: the backend decides (mpi takes MPI's)
  int world_size = 1;  // -1: likewise
  Milliseconds timeout{std::chrono::minutes(10)};
  std::string host;      // address peers reach us on (gloo picks a device)
  int cuda_device = -1;  // nccl: this process's GPU (-1: LOCAL_RANK's, modulo the GPUs visible)
  // gloo, for a group that its members may give up (Membership: a member failed, the others rebuild): once it
  // says true, a wait on the group fails at once (CommError) instead of waiting for peers that left the collective,
  // and the group is let go without joining workers still blocked in it. Asked only while a wait is slow.
  std::function<bool()> given_up;
};

// All backend names ddp knows, built or not: {"gloo", "mpi", "nccl", "local"}.
std::vector<std::string> backend_names();
// Names of the backends compiled into this build and usable.
std::vector<std::string> available_backends();
bool is_backend_available(const std::string& name);
// Creates a group with the named backend. Unknown names throw
// std::invalid_argument listing the valid ones; names not built throw ddp::Error.
GroupPtr create_backend(const std::string& name, const BackendOptions& opts);

}  // namespace ddp
