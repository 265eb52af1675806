// dist/member_pulse.h: a member's pulse beats while it lives and stops with it; a watch tells how long a pulse has
// been still; a pulse whose store fails says so once and stops.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "ddp/dist/store.h"
#include "dist/member_pulse.h"
#include "support/free_port.h"

namespace {

using ddp::detail::MemberPulse;
using ddp::detail::PulseWatch;
using namespace std::chrono_literals;

int64_t beats(const ddp::StorePtr& store, int id) { return store->add("pulse/" + std::to_string(id), 0); }

// Waits (a hang: 60 s) until `done`.
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(MemberPulse, BeatsWhileItLivesAndStopsWithIt) {
  auto store = ddp::make_hash_store();
  auto pulse = std::make_unique<MemberPulse>(store, 3, 10ms, "test: ");
  ASSERT_TRUE(eventually([&] { return beats(store, 3) >= 3; }));
  EXPECT_EQ(beats(store, 2), 0);  // its own key only
  pulse.reset();
  const int64_t last = beats(store, 3);
  std::this_thread::sleep_for(50ms);  // 5 intervals
  EXPECT_EQ(beats(store, 3), last);
}

TEST(MemberPulse, AWatchMeasuresHowLongAPulseHasBeenStill) {
  auto store = ddp::make_hash_store();
  PulseWatch watch(store, 0ms);     // reads the store at every look
  EXPECT_LT(watch.still(1), 50ms);  // since the first look
  std::this_thread::sleep_for(60ms);
  EXPECT_GE(watch.still(1), 60ms);  // never beat
  store->add("pulse/1", 1);
  EXPECT_LT(watch.still(1), 60ms);  // moved: from this look
  std::this_thread::sleep_for(60ms);
  EXPECT_GE(watch.still(1), 60ms);

  PulseWatch slow(store, 1h);  // reads each pulse once an hour: a beat is not seen until then
  slow.still(1);
  store->add("pulse/1", 1);
  std::this_thread::sleep_for(60ms);
  EXPECT_GE(slow.still(1), 60ms);
}

TEST(MemberPulse, AFailingStoreIsSaidOnceAndStopsThePulse) {
  const int port = ddp::test::free_port();
  auto server = ddp::make_tcp_store("127.0.0.1", port, true, 2, 5s);
  auto client = ddp::make_tcp_store("127.0.0.1", port, false, 2, 5s);
  testing::internal::CaptureStderr();
  {
    MemberPulse pulse(client, 1, 10ms, "[elastic] member 1: ");
    ASSERT_TRUE(eventually([&] { return beats(server, 1) >= 2; }));
    server.reset();  // the store's host ends
    std::this_thread::sleep_for(500ms);
  }  // joins the stopped thread
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string said = "[elastic] member 1: its pulse stopped: ";
  const auto once = err.find(said);  // after c10d's own warning (2.x)
  EXPECT_NE(once, std::string::npos) << err;
  EXPECT_EQ(err.find(said, once + 1), std::string::npos) << "said more than once: " << err;
}

}  // namespace
