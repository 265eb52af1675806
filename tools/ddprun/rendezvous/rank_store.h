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

  // Whether the members formed their group already: ranks started now (a node that comes back) must join it.
  virtual bool job_running() = 0;

  // Several nodes: another node's ddprun says it is alive (each --monitor-interval; an error message when node
  // 0's store did not answer: this node is cut off) and, at its end, done.
  virtual std::string beat() = 0;
  virtual void done() = 0;
  // Node 0's: one look at nodes 1 .. node_ranks - 1 (those that ever beat); returns those now counted lost, silent
  // for `silent_s` (their ddprun died with the node, or their link is cut; 0: never).
  virtual std::vector<int> watch(int node_ranks, double silent_s) = 0;
  // After watch(): how many of the other nodes still run (neither done nor counted lost).
  virtual int others_running() const = 0;
};

// Node `node` (its node rank): node 0 serves the store on host:port until the returned object is destroyed; the
// others connect to it, waiting up to `connect_timeout_s` for it. Every operation gets `op_timeout_s` to answer.
// nullptr and *error when it cannot.
std::unique_ptr<RankStore> open_rank_store(const std::string& host, int port, int world_size, int node,
                                           double connect_timeout_s, double op_timeout_s, std::string* error);

}  // namespace ddprun
