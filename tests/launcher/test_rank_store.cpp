// --recovery inplace's store (tools/ddprun/rendezvous/rank_store.h): ddprun marks a lost process by the member
// id it registered under (a replacement's is not its launch rank), else by its launch rank.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ddp/dist/membership_keys.h"
#include "launch/net_check.h"
#include "rendezvous/rank_store.h"

namespace ddprun {
namespace {

// A rank's connection to the store.
c10::intrusive_ptr<c10d::TCPStore> connect(int port) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(10);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

TEST(RankStore, ALostProcessIsMarkedByTheMemberItRegisteredAs) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  auto hosted = open_rank_store("127.0.0.1", port, 3, /*node=*/0, 30, 30, &error);
  ASSERT_NE(hosted, nullptr) << error;
  auto client = connect(port);
  const std::string id = "7";
  client->set(ddp::membership_keys::pid(0, 4242), std::vector<uint8_t>(id.begin(), id.end()));  // a replacement
  client->get(ddp::membership_keys::pid(0, 4242));  // c10d's set is not answered: this round trip orders it first
  hosted->mark_lost(2, 4242, "SIGKILL");
  EXPECT_TRUE(client->check({ddp::membership_keys::lost(7)}));
  EXPECT_FALSE(client->check({ddp::membership_keys::lost(2)}));
  hosted->mark_lost(1, 999, "exit 3");  // never registered (lost before it could): its launch rank
  const std::vector<uint8_t> how = client->get(ddp::membership_keys::lost(1));
  EXPECT_EQ(std::string(how.begin(), how.end()), "exit 3");
}

// Another node's ddprun connects to node 0's store and marks its own lost processes: a pid is a node's own (the
// same pid on node 0 is another process).
TEST(RankStore, AnotherNodeMarksItsLostProcessesInNodeZerosStore) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  auto node0 = open_rank_store("127.0.0.1", port, 4, 0, 30, 30, &error);
  ASSERT_NE(node0, nullptr) << error;
  auto node1 = open_rank_store("127.0.0.1", port, 4, 1, 30, 30, &error);
  ASSERT_NE(node1, nullptr) << error;
  auto client = connect(port);
  const std::string on0 = "1", on1 = "5";
  client->set(ddp::membership_keys::pid(0, 777), std::vector<uint8_t>(on0.begin(), on0.end()));
  client->set(ddp::membership_keys::pid(1, 777), std::vector<uint8_t>(on1.begin(), on1.end()));
  client->get(ddp::membership_keys::pid(1, 777));  // orders the sets before the lookups
  node1->mark_lost(3, 777, "SIGKILL");
  EXPECT_TRUE(client->check({ddp::membership_keys::lost(5)}));
  EXPECT_FALSE(client->check({ddp::membership_keys::lost(1)}));
  EXPECT_FALSE(client->check({ddp::membership_keys::lost(3)}));
}

// Node 0's store not there: a node that cannot reach it says so, after the timeout.
TEST(RankStore, NodeZerosStoreUnreachableIsAnError) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  EXPECT_EQ(open_rank_store("127.0.0.1", port, 2, 1, 0.5, 5, &error), nullptr);
  EXPECT_NE(error.find("--recovery inplace: cannot reach the ranks' store that node 0 hosts on 127.0.0.1:" +
                       std::to_string(port)),
            std::string::npos)
      << error;
}

TEST(RankStore, APortInUseIsAnError) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  auto first = open_rank_store("127.0.0.1", port, 2, 0, 30, 30, &error);
  ASSERT_NE(first, nullptr) << error;
  EXPECT_EQ(open_rank_store("127.0.0.1", port, 2, 0, 30, 30, &error), nullptr);
  EXPECT_NE(error.find("--recovery inplace: cannot host the ranks' store on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace ddprun
