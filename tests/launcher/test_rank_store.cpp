// --recovery inplace's store (tools/ddprun/rendezvous/rank_store.h): ddprun marks a lost process by the member
// id it registered under (a replacement's is not its launch rank), else by its launch rank.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ddp/dist/membership_keys.h"
#include "launch/net_check.h"
#include "rendezvous/rank_store.h"

namespace ddprun {
namespace {

TEST(RankStore, ALostProcessIsMarkedByTheMemberItRegisteredAs) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  auto hosted = host_rank_store("127.0.0.1", port, 3, &error);
  ASSERT_NE(hosted, nullptr) << error;
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(10);
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  const std::string id = "7";
  client->set(ddp::membership_keys::pid(4242), std::vector<uint8_t>(id.begin(), id.end()));  // a replacement
  client->get(ddp::membership_keys::pid(4242));  // c10d's set is not answered: this round trip orders it first
  hosted->mark_lost(2, 4242, "SIGKILL");
  EXPECT_TRUE(client->check({ddp::membership_keys::lost(7)}));
  EXPECT_FALSE(client->check({ddp::membership_keys::lost(2)}));
  hosted->mark_lost(1, 999, "exit 3");  // never registered (lost before it could): its launch rank
  const std::vector<uint8_t> how = client->get(ddp::membership_keys::lost(1));
  EXPECT_EQ(std::string(how.begin(), how.end()), "exit 3");
}

TEST(RankStore, APortInUseIsAnError) {
  std::string error;
  const int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  auto first = host_rank_store("127.0.0.1", port, 2, &error);
  ASSERT_NE(first, nullptr) << error;
  EXPECT_EQ(host_rank_store("127.0.0.1", port, 2, &error), nullptr);
  EXPECT_NE(error.find("--recovery inplace: cannot host the ranks' store on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace ddprun
