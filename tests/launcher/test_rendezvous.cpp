// The c10d rendezvous rounds of ddprun's multi-node agent (tools/ddprun/rendezvous/rendezvous.h): closing rules, node
// ranks, late joiners, failed rounds, timeouts, a lost store. Agents are threads over one HashStore (or an
// in-process TCPStore for the lost-store case).
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <future>
#include <thread>

#include "launch/net_check.h"
#include "rendezvous/rdzv_store.h"
#include "rendezvous/rendezvous.h"

using namespace ddprun;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

RdzvSettings settings(int min_nodes, int max_nodes, int nproc, bool is_host) {
  RdzvSettings s;
  s.min_nodes = min_nodes;
  s.max_nodes = max_nodes;
  s.last_call_s = 0.3;
  s.join_timeout_s = 30;
  s.host = "10.1.2.3";
  s.port = 29400;
  s.job_id = "job";
  s.nproc = nproc;
  s.is_host = is_host;
  s.poll_s = 0.01;
  s.sleep = [](double secs) {
    std::this_thread::sleep_for(std::chrono::duration<double>(secs));
    return 0;
  };
  s.pick_port = [] { return 4242; };
  return s;
}

// One agent: its own guarded view of the shared store and its Rendezvous.
struct Agent {
  Agent(const c10::intrusive_ptr<c10d::Store>& store, RdzvSettings s)
      : kv(guard_store(store, "10.1.2.3:29400", 30)), rdzv(*kv, std::move(s)) {}
  std::shared_ptr<RdzvKV> kv;
  Rendezvous rdzv;
};

// Starts next_round() of `agent` on a thread.
std::future<RoundInfo> join(Agent& agent) {
  return std::async(std::launch::async, [&agent] { return agent.rdzv.next_round(); });
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Waits until `n` agents joined `round` (no sleeps that a loaded machine could outlast).
void wait_joined(const c10::intrusive_ptr<c10d::HashStore>& store, int round, int n) {
  const std::string key = "ddprun/r" + std::to_string(round) + "/joined";
  for (int i = 0; i < 3000 && store->add(key, 0) < n; ++i) sleep_s(0.01);
  ASSERT_GE(store->add(key, 0), n) << key;
}

}  // namespace

TEST(Rendezvous, ClosesAtMaxWithHostFirstAndJoinOrder) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  RdzvSettings host_settings = settings(1, 3, 2, true);
  host_settings.last_call_s = 100;  // only MAX can close it
  Agent a(store, settings(1, 3, 3, false)), host(store, host_settings), b(store, settings(1, 3, 1, false));
  store->set("ddprun/job", std::vector<uint8_t>{'j', 'o', 'b'});  // the host's store setup, done first
  auto ra = join(a);                                              // joins first
  wait_joined(store, 0, 1);
  auto start = Clock::now();
  auto rh = join(host);
  wait_joined(store, 0, 2);
  auto rb = join(b);
  RoundInfo h = rh.get(), x = ra.get(), y = rb.get();
  EXPECT_LT(since(start), 10.0);  // not the last call (100 s)
  for (const RoundInfo* r : {&h, &x, &y}) {
    EXPECT_EQ(r->round, 0);
    EXPECT_EQ(r->nnodes, 3);
    EXPECT_EQ(r->world_size, 6);  // 2 + 3 + 1
    EXPECT_EQ(r->master_addr, "10.1.2.3");
    EXPECT_EQ(r->master_port, 4242);
    EXPECT_EQ(r->restart_count, 0);
  }
  EXPECT_EQ(h.node_rank, 0);
  EXPECT_EQ(h.first_rank, 0);
  EXPECT_EQ(x.node_rank, 1);  // joined before b
  EXPECT_EQ(x.first_rank, 2);
  EXPECT_EQ(y.node_rank, 2);
  EXPECT_EQ(y.first_rank, 5);
}

TEST(Rendezvous, ClosesAtMinAfterLastCall) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Agent host(store, settings(2, 4, 1, true)), a(store, settings(2, 4, 1, false));
  auto start = Clock::now();
  auto rh = join(host);
  sleep_s(0.2);
  auto ra = join(a);
  RoundInfo h = rh.get(), x = ra.get();
  EXPECT_GE(since(start), 0.2 + 0.3);  // the last call after the second join
  EXPECT_EQ(h.nnodes, 2);
  EXPECT_EQ(x.nnodes, 2);
  EXPECT_EQ(x.node_rank, 1);
  EXPECT_EQ(x.world_size, 2);
}

TEST(Rendezvous, FewerThanMinTimesOut) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  RdzvSettings s = settings(2, 2, 1, true);
  s.join_timeout_s = 0.5;
  Agent host(store, s);
  auto start = Clock::now();
  try {
    host.rdzv.next_round();
    FAIL() << "no error";
  } catch (const RendezvousError& e) {
    EXPECT_STREQ(e.what(),
                 "rendezvous at 10.1.2.3:29400: round 0: only 1 of at least 2 node(s) joined within join_timeout "
                 "0.5 s (--nnodes 2:2, --rdzv-conf join_timeout); start ddprun on the other nodes with the same "
                 "--rdzv-endpoint and --rdzv-id");
  }
  EXPECT_GE(since(start), 0.5);
  EXPECT_LT(since(start), 5.0);
}

TEST(Rendezvous, LateNodeGrowsTheJob) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Agent host(store, settings(1, 3, 1, true)), a(store, settings(1, 3, 1, false)), late(store, settings(1, 3, 1, false));
  store->set("ddprun/job", std::vector<uint8_t>{'j', 'o', 'b'});  // the host's store setup, done first
  auto ra = join(a);
  wait_joined(store, 0, 1);
  auto rh = join(host);  // 2 joined: closes after the last call
  RoundInfo h = rh.get(), x = ra.get();
  ASSERT_EQ(h.nnodes, 2);
  EXPECT_EQ(host.rdzv.should_stop(h), "");
  auto rl = join(late);  // round 0 is closed: waits for round 1
  wait_joined(store, 1, 1);
  const std::string why =
      "1 node(s) waiting to join (round 0 has 2 of at most 3): restarting into a bigger round "
      "(not counted as a restart)";
  EXPECT_EQ(host.rdzv.should_stop(h), why);
  EXPECT_EQ(a.rdzv.should_stop(x), why);
  EXPECT_FALSE(host.rdzv.failed(h));
  a.rdzv.mark_failed(x, "rank 1 exited with code 1");  // its rank saw the others go: not a failure
  EXPECT_FALSE(host.rdzv.failed(h));
  rh = join(host);
  ra = join(a);
  h = rh.get();
  x = ra.get();
  RoundInfo l = rl.get();
  EXPECT_EQ(h.round, 1);
  EXPECT_EQ(h.nnodes, 3);
  EXPECT_EQ(l.nnodes, 3);
  EXPECT_EQ(l.node_rank, 1);  // joined round 1 first
  EXPECT_EQ(x.node_rank, 2);
  EXPECT_EQ(h.restart_count, 0);  // a bigger round is not a restart
  EXPECT_EQ(l.restart_count, 0);
  EXPECT_EQ(h.world_size, 3);
}

TEST(Rendezvous, FailedRoundRestartsWithoutTheLostNode) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Agent host(store, settings(1, 2, 2, true)), a(store, settings(1, 2, 2, false));
  store->set("ddprun/job", std::vector<uint8_t>{'j', 'o', 'b'});  // the host's store setup, done first
  auto ra = join(a);  // joins first: the host's join reaches MAX and closes round 0 however late a thread starts
  wait_joined(store, 0, 1);
  auto rh = join(host);
  RoundInfo h = rh.get(), x = ra.get();
  ASSERT_EQ(h.world_size, 4);
  a.rdzv.mark_failed(x, "rank 3 exit code 1");
  EXPECT_EQ(host.rdzv.should_stop(h), "round 0 failed on node 1: rank 3 exit code 1");
  EXPECT_TRUE(host.rdzv.failed(h));
  host.rdzv.mark_failed(h, "rank 0 exit code 1");  // the first failure is kept
  EXPECT_EQ(a.rdzv.should_stop(x), "round 0 failed on node 1: rank 3 exit code 1");
  // Node 1 is gone: the host alone makes round 1 after the last call, with restart count 1.
  h = host.rdzv.next_round();
  EXPECT_EQ(h.round, 1);
  EXPECT_EQ(h.nnodes, 1);
  EXPECT_EQ(h.world_size, 2);
  EXPECT_EQ(h.restart_count, 1);
  // A node arriving now finds round 1 closed and waits for round 2.
  Agent again(store, settings(1, 2, 2, false));
  auto rg = join(again);
  wait_joined(store, 2, 1);
  EXPECT_EQ(host.rdzv.should_stop(h).rfind("1 node(s) waiting to join", 0), 0u);
  h = host.rdzv.next_round();
  RoundInfo g = rg.get();
  EXPECT_EQ(g.round, 2);
  EXPECT_EQ(g.node_rank, 1);
  EXPECT_EQ(g.first_rank, 2);
  EXPECT_EQ(h.restart_count, 1);
  // Success: the host waits for the others to be done.
  host.rdzv.mark_done(h);
  EXPECT_EQ(host.rdzv.wait_done(h, 0.2, true), 1);
  again.rdzv.mark_done(g);
  EXPECT_EQ(host.rdzv.wait_done(h, 5, true), 2);
}

TEST(Rendezvous, AnotherJobsStore) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Agent host(store, settings(1, 1, 1, true));
  host.rdzv.next_round();
  RdzvSettings s = settings(1, 1, 1, false);
  s.job_id = "other";
  Agent a(store, s);
  try {
    a.rdzv.next_round();
    FAIL() << "no error";
  } catch (const RendezvousError& e) {
    EXPECT_STREQ(e.what(),
                 "rendezvous at 10.1.2.3:29400: the store belongs to job 'job' but this node has --rdzv-id 'other'; "
                 "give every node of a job the same --rdzv-id (and each job its own --rdzv-endpoint port)");
  }
}

namespace {

// A store whose add() never answers in time (a host whose link is cut).
class SilentStore : public c10d::HashStore {
 public:
  int64_t add(const std::string& key, int64_t value) override {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return c10d::HashStore::add(key, value);
  }
};

}  // namespace

TEST(RendezvousStore, AnOperationWithoutAnswerFails) {
  auto kv = guard_store(c10::make_intrusive<SilentStore>(), "10.1.2.3:29400", 0.2);
  auto start = Clock::now();
  try {
    kv->add("k", 1);
    FAIL() << "no error";
  } catch (const RendezvousError& e) {
    EXPECT_STREQ(e.what(),
                 "the rendezvous store at 10.1.2.3:29400 did not answer within 0.2 s: the agent hosting it "
                 "is gone or the link to it is down");
  }
  EXPECT_LT(since(start), 1.5);
  EXPECT_THROW(kv->check("k"), RendezvousError);  // dead for good
}

TEST(RendezvousStore, HostAndClientThenHostGone) {
  std::string error;
  int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  RdzvStore host = open_rdzv_store("127.0.0.1", port, 10, 10);
  ASSERT_TRUE(host.is_host);
  RdzvStore client = open_rdzv_store("127.0.0.1", port, 10, 10);
  EXPECT_FALSE(client.is_host);  // the port is taken by the host now
  EXPECT_EQ(host.kv->add("n", 2), 2);
  EXPECT_EQ(client.kv->add("n", 3), 5);
  host = RdzvStore();  // the host agent exits
  sleep_s(0.2);
  try {
    client.kv->add("n", 1);
    FAIL() << "no error";
  } catch (const RendezvousError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("lost the rendezvous store at 127.0.0.1:" + std::to_string(port) + " (", 0), 0u) << what;
    EXPECT_NE(what.find("): the agent hosting it exited or the link to it is down"), std::string::npos) << what;
  }
}

// --recovery inplace: the round never restarts for nodes that come; they attach to it while fewer than MAX nodes
// are live (an ended or lost node frees its place), each with a node rank after the round's and the round's world
// (its ranks join with new ids); one with no place waits and fails after join_timeout, naming the limit.
TEST(Rendezvous, InplaceNodesAttachToTheRunningRoundUpToMax) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto inplace = [](RdzvSettings s) {
    s.inplace = true;
    return s;
  };
  Agent host(store, inplace(settings(1, 2, 2, true)));
  const RoundInfo h = join(host).get();  // alone after the last call
  EXPECT_EQ(h.nnodes, 1);
  EXPECT_EQ(h.world_size, 2);
  EXPECT_FALSE(h.attached);
  Agent a(store, inplace(settings(1, 2, 3, false)));
  const RoundInfo x = join(a).get();
  EXPECT_TRUE(x.attached);
  EXPECT_EQ(x.round, 0);
  EXPECT_EQ(x.node_rank, 1);
  EXPECT_EQ(x.world_size, 2);  // the round's: joiners take ids from it
  EXPECT_EQ(x.first_rank, 2);
  EXPECT_EQ(x.master_port, 4242);
  EXPECT_EQ(host.rdzv.should_stop(h), "");  // nodes that come never restart it
  EXPECT_EQ(host.rdzv.node_ranks(h), 2);

  RdzvSettings late = inplace(settings(1, 2, 1, false));
  late.join_timeout_s = 0.3;
  Agent b(store, late);
  auto start = Clock::now();
  try {
    join(b).get();
    ADD_FAILURE() << "a third node attached to a round of at most 2";
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("round 0 kept 2 node(s), the most --nnodes allows, for join_timeout 0.3 s"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(since(start), 0.3);

  host.rdzv.node_left(x);  // node 1 lost (node 0 counted it so): its place is free
  Agent c(store, inplace(settings(1, 2, 1, false)));
  const RoundInfo y = join(c).get();
  EXPECT_TRUE(y.attached);
  EXPECT_EQ(y.node_rank, 2);  // a new node rank
  EXPECT_EQ(y.first_rank, 2 + 1 * 1);
  EXPECT_EQ(host.rdzv.node_ranks(h), 3);
}
