// --recovery inplace: the ranks' store, hosted by ddprun for one attempt so that it outlives every rank (rank 0
// included), and where ddprun marks the ranks it lost (ddp/dist/membership_keys.h). Torch-free interface.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace ddprun {

class RankStore {
 public:
  virtual ~RankStore() = default;
  // Tells the survivors that the process `pid` is gone for good: the member it registered as (a replacement's id
  // is not its launch rank), else the launch rank `rank`. `how` ("SIGKILL", "exit 3") is the key's value.
  virtual void mark_lost(int rank, pid_t pid, const std::string& how) = 0;
};

// Serves the store on host:port until the returned object is destroyed; nullptr and *error when it cannot.
std::unique_ptr<RankStore> host_rank_store(const std::string& host, int port, int world_size, std::string* error);

}  // namespace ddprun
