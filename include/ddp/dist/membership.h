// A world that outlives the loss of ranks (ddprun --recovery inplace). Each generation is a fresh group on a
// store prefix of its own; when a rank is lost, the survivors leave the broken group, agree through the store on
// who is left and build the next generation among themselves, keeping everything they hold in memory.
//
//   auto m = ddp::Membership::from_environment();     // under ddprun --recovery inplace
//   for (int step = 0; step < steps;) {
//     try { train_step(m->group()); ++step; }
//     catch (const ddp::CommError& e) { m->rebuild(e.what()); step = agree_on_step(m->group(), step); }
//   }
//
// The store must outlive every rank: ddprun hosts it, and marks a rank that exits "lost" in it (ids below). While a
// member lives, a thread of its own beats its pulse there, so that a rebuild waits for a member that is slow to come
// and counts one that stopped lost (MembershipOptions::settle, timeout).
// Members are named by ids: the launch rank (RANK) for the first generation's members. A rank's place in a
// generation is its id's index in the generation's sorted member list.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/backend.h"
#include "ddp/dist/membership_keys.h"
#include "ddp/dist/store.h"

namespace ddp {
namespace detail {
class MemberPulse;
}

struct MembershipOptions {
  std::string backend = "gloo";  // a backend whose broken group can be destroyed and rebuilt: gloo
  std::string host;              // the store's host: gloo talks to peers over the interface toward it ("": loopback)
  int min_world = 1;             // fewer members than this left: rebuild() throws
  // Each generation's collective timeout; also how long a rebuild waits for a member that is alive (its pulse
  // moves) but does not come (a long save, a long step) before counting it lost.
  Milliseconds timeout{600000};
  // How long a rebuild waits for a member whose pulse is still (a rank that stopped, a cut link) before counting it
  // lost. Each member's pulse beats every settle / 10 while its Membership lives.
  Milliseconds settle{30000};
  int node = 0;  // the launcher's node rank (GROUP_RANK): the member registers its pid there (membership_keys.h)
  // The pulse's own connection to the same store (from_environment() opens one); null: the store itself, whose
  // calls a TCPStore serializes (a long wait there delays the pulse).
  StorePtr pulse_store;
};

class Membership {
 public:
  // Generation 0: ids 0..world-1, this process `id`. Blocks until every member's group is up.
  Membership(StorePtr store, int id, int world, MembershipOptions options = {});
  // From ddprun --recovery inplace's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DDP_BACKEND,
  // DDP_TIMEOUT, DDP_HEARTBEAT_TIMEOUT for `settle`, GROUP_RANK for `node`); ddp::Error when ddprun did not host
  // the store.
  static std::unique_ptr<Membership> from_environment();
  // A new member (a replacement, a node that comes back): takes the next free id (first_world, first_world + 1,
  // ...), waits until the members admit it (admit()) and returns in the generation they formed with it. ddp::Error
  // when it is not admitted within options.timeout, or was counted lost.
  static std::unique_ptr<Membership> join(StorePtr store, int first_world, MembershipOptions options = {});
  // join() from ddprun's environment, as from_environment() reads it (a replacement ddprun started: DDP_JOIN=1).
  // Both return null when the members finished (finish()) before they admitted this joiner.
  static std::unique_ptr<Membership> join_from_environment();
  ~Membership();

  GroupPtr group() const { return group_; }
  int generation() const { return generation_; }
  int id() const { return id_; }
  int first_world() const { return first_world_; }              // the first generation's members: the launch world
  const std::vector<int>& members() const { return members_; }  // ids, in rank order

  // Leaves the current generation, agrees with the other survivors on the next one and builds its group; returns
  // it. The current group is given up first (BackendOptions::given_up): peers still waiting in it fail within a
  // tenth of a second, as they do once the launcher marks a member lost, and it is let go without joining workers
  // blocked in it. `why`: the failure, for the log line. Throws ddp::Error when fewer than min_world members are
  // left or when this member was counted lost.
  GroupPtr rebuild(const std::string& why);

  // Members who asked to join (join()) and are not admitted yet. Reads the store: call it on one rank and share
  // the answer, so that every member calls admit() at the same point.
  int joiners_waiting();
  // Every member at once: the next generation is the members and the joiners waiting (those not lost meanwhile);
  // returns its group. The state the joiners need is the caller's to send them.
  GroupPtr admit();
  // The job is done: a joiner still waiting gives up (join() returns null). Any member, once.
  void finish();

 private:
  struct Decision {
    std::vector<int> members;
    int consumed = 0;  // joiners considered so far (the "joiners" counter's value the decision took)
  };
  Membership(StorePtr store, int first_world, MembershipOptions options);  // a joiner's, before it is admitted
  static Decision parse_decision(const std::vector<uint8_t>& stored);
  bool everyone_lost(int generation);
  Decision agree_on_members(int generation, const std::vector<int>& candidates, int consumed);
  GroupPtr next_generation(std::string reason, bool with_joiners);
  void wait_until_ready(int generation, const std::vector<int>& members);
  void build(int generation, std::vector<int> members);
  void start_pulse();

  StorePtr store_;
  int id_;
  int first_world_;
  MembershipOptions options_;
  int generation_ = 0;
  int consumed_ = 0;  // joiners admitted or found lost, as of this generation
  std::vector<int> members_;
  GroupPtr group_;
  std::unique_ptr<detail::MemberPulse> pulse_;
};

}  // namespace ddp
