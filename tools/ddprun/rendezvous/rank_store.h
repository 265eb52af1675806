// --recovery inplace: the ranks' store, hosted by ddprun for one attempt so that it outlives every rank (rank 0
// included), and where ddprun marks the ranks it lost (ddp/dist/membership_keys.h). Node 0's ddprun hosts it; the
// others connect to it. Torch-free interface.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ddprun {

class RankStore {
 public:
  virtual ~RankStore() = default;
  // Tells the survivors that the process `pid` of this node is gone for good: the member it registered as (a
  // replacement's id is not its launch rank), else the launch rank `rank`. `how` ("SIGKILL", "exit 3") is the
  // key's value.
  virtual void mark_lost(int rank, pid_t pid, const std::string& how) = 0;

  // Several nodes: another node's ddprun says it is alive (each --monitor-interval) and, at its end, done. Node
  // 0's keeps serving the store after its own ranks end until every other node is done or was silent for
  // `silent_s` (its ddprun died with the node); returns the nodes it counted lost so.
  // Whether the members formed their group already: ranks started now (a node that comes back) must join it.
  virtual bool job_running() = 0;
  virtual void beat() = 0;
  virtual void done() = 0;
  virtual std::vector<int> serve_until_others_end(int nnodes, double silent_s) = 0;
};

// Node `node` (its node rank): node 0 serves the store on host:port until the returned object is destroyed; the
// others connect to it, waiting up to `timeout_s` for it. nullptr and *error when it cannot.
std::unique_ptr<RankStore> open_rank_store(const std::string& host, int port, int world_size, int node,
                                           double timeout_s, std::string* error);

}  // namespace ddprun
