// The c10d rendezvous of the multi-node agents (torchrun's --rdzv-backend c10d), as rounds on a key-value store
// (the TCPStore hosted by the agent on --rdzv-endpoint's host; see rdzv_store.h):
//  * an agent joins the first round not yet closed (an atomic counter gives its join index);
//  * the host agent closes a round when MAX nodes joined, or MIN joined and last_call_timeout passed without a
//    new one; it fails the rendezvous when fewer than MIN joined within join_timeout;
//  * node ranks: the host first (its address is MASTER_ADDR), then the others by join index; each node's first
//    rank is the sum of the nproc of the nodes before it;
//  * an agent that joined after the close waits for the next round, and its join tells the running agents
//    (nodes waiting, with fewer than MAX in the round) to restart into a bigger one: not counted as a restart;
//  * a failure on any node marks the round failed: every agent stops its ranks and joins the next round, whose
//    restart count is one higher.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace ddprun {

// The store operations the rendezvous needs (c10d::Store's; see rdzv_store.h).
class RdzvKV {
 public:
  virtual ~RdzvKV() = default;
  virtual int64_t add(const std::string& key, int64_t n) = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual bool check(const std::string& key) = 0;
  virtual std::string get(const std::string& key) = 0;  // the key exists
};

// A failed rendezvous (timeout, store lost, another job's store): the message is the whole error line.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RdzvSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  double last_call_s = 1.0;
  double join_timeout_s = 600.0;
  std::string host;  // the endpoint's host: MASTER_ADDR of every round
  int port = 29400;  // the endpoint's port (messages only)
  std::string job_id;
  int nproc = 1;  // this node's ranks
  bool is_host = false;
  double poll_s = 0.05;
  // Sleeps up to `s` seconds; returns a stop signal ddprun received meanwhile (0: none).
  std::function<int(double)> sleep;
  // A free port for the ranks' store on the host (called by the host when it closes a round).
  std::function<int()> pick_port;
  // Progress lines for the user (optional).
  std::function<void(const std::string&)> log;
  // --recovery inplace: a node that comes after the close attaches to the running round (its ranks join the job)
  // while the round has fewer than max_nodes nodes left; nodes waiting never make a running round restart.
  bool inplace = false;
};

// One closed round, as this node takes part in it.
struct RoundInfo {
  int round = 0;
  int node_rank = 0;
  int nnodes = 0;
  int world_size = 0;
  int first_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // failed rounds before this one
  bool attached = false;  // --recovery inplace: joined the round while it ran (node_rank >= nnodes)
};

// ddprun got a stop signal while waiting in the rendezvous.
struct RdzvInterrupted {
  int signal;
};

class Rendezvous {
 public:
  Rendezvous(RdzvKV& kv, RdzvSettings settings) : kv_(kv), s_(std::move(settings)) {}

  // Joins the next round and waits for it to close (moving on to the one after if this node came too late).
  // Throws RendezvousError, or RdzvInterrupted on a stop signal.
  RoundInfo next_round();

  // While `r` runs: why this node's ranks must stop ("" = keep going): the round failed on some node, or
  // nodes wait to join and the round has fewer than MAX.
  std::string should_stop(const RoundInfo& r);

  // This node failed in `r` (`what`: e.g. "rank 1 exited with code 1"); unless the round already ended.
  void mark_failed(const RoundInfo& r, const std::string& what);
  // Whether `r` ended as a failure (counted as a restart), not by nodes joining.
  bool failed(const RoundInfo& r);
  // This node leaves the job (its ranks all exited 0, or it gives up).
  void mark_done(const RoundInfo& r);
  // --recovery inplace: a node of `r` ended or was counted lost (its place is free for a node to attach), and the
  // node ranks `r` gave out so far (attached nodes included).
  void node_left(const RoundInfo& r);
  int live_nodes(const RoundInfo& r);  // the round's nodes neither ended nor lost
  bool any_done(const RoundInfo& r);   // a node of `r` ended normally (mark_done)
  int node_ranks(const RoundInfo& r);
  // The host, before it exits (its store goes with it): waits until every node of `r` is done (exited or
  // gave up), `r` failed (with stop_on_failure) or `timeout_s` passed. Returns the number of nodes done.
  int wait_done(const RoundInfo& r, double timeout_s, bool stop_on_failure);

 private:
  std::string key(int round, const std::string& name) const;
  std::string where() const;
  void check_job();
  // Waits until `k` exists (host's progress), polling; throws after join_timeout.
  std::string wait_key(const std::string& k, const std::string& what);
  void close_round(int round);  // the host: waits for the closing rule, then publishes the round
  // Round `round` once closed, as the node with join index `index` takes part in it (node_rank -1: not a member).
  RoundInfo describe(int round, int index);
  // --recovery inplace: this node came after `round` closed; a place in it while it runs, else false.
  bool attach(int round, const RoundInfo& closed, RoundInfo* r);

  RdzvKV& kv_;
  RdzvSettings s_;
  int next_ = -1;  // the round to join next (-1: find the first open one)
  bool job_checked_ = false;
  int host_index_ = 0;  // the host's join index in the round it is closing
};

}  // namespace ddprun
