// ddp::Membership on threads: members leave (as a killed rank's connections close) and the others rebuild their
// group among themselves and go on; the sums after a rebuild prove who is in the new world.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "ddp/dist.h"
#include "ddp/dist/membership.h"

namespace {

using ddp::Membership;
using ddp::MembershipOptions;

// How a member leaves at its step: as a killed rank whose launcher reports it, or silently (a stopped rank).
enum class Leave { kLost, kSilent };

struct Plan {
  int world = 4;
  std::map<int, int> leave_at;  // id -> step at which it leaves (before its collective)
  Leave how = Leave::kLost;
  int steps = 12;
  int min_world = 1;
};

struct Outcome {
  std::mutex mu;
  std::map<int, std::vector<int>> final_members;  // id -> members it ended with
  std::map<int, int> generations;
  std::map<int, std::string> errors;      // id -> what rebuild() threw
  std::set<std::pair<int, int>> checked;  // (id, step) whose sum was right
};

// Every step all-reduces (id + 1) * (step + 1) and checks the sum against the current members; after a rebuild
// the members agree on the step to go on from (the highest completed: a member may have completed the failed one).
void member(const Plan& plan, int id, const ddp::StorePtr& store, Outcome& out) {
  MembershipOptions o;
  o.timeout = std::chrono::seconds(60);
  o.settle = std::chrono::milliseconds(plan.how == Leave::kSilent ? 1500 : 60000);
  o.min_world = plan.min_world;
  auto m = std::make_unique<Membership>(store, id, plan.world, o);
  int step = 0;
  while (step < plan.steps) {
    auto it = plan.leave_at.find(id);
    if (it != plan.leave_at.end() && it->second == step) {
      m.reset();  // its connections close, as at a kill
      if (plan.how == Leave::kLost) store->set(ddp::membership_keys::lost(id), {'x'});
      return;
    }
    try {
      at::Tensor t = at::full({1000}, static_cast<double>((id + 1) * (step + 1)), at::kDouble);
      m->group()->all_reduce(t);
      double want = 0;
      for (int member : m->members()) want += (member + 1) * (step + 1);
      EXPECT_EQ(t[999].item<double>(), want) << "member " << id << " step " << step;
      {
        std::lock_guard<std::mutex> lock(out.mu);
        out.checked.insert({id, step});
      }
      ++step;
    } catch (const ddp::CommError& e) {
      try {
        m->rebuild(e.what());
      } catch (const ddp::Error& lost) {
        std::lock_guard<std::mutex> lock(out.mu);
        out.errors[id] = lost.what();
        return;
      }
      at::Tensor s = at::full({1}, step, at::kLong);
      ddp::AllReduceOptions max;
      max.op = ddp::ReduceOp::MAX;
      m->group()->all_reduce(s, max);
      step = static_cast<int>(s.item<int64_t>());
    }
  }
  std::lock_guard<std::mutex> lock(out.mu);
  out.final_members[id] = m->members();
  out.generations[id] = m->generation();
}

void run(const Plan& plan, Outcome& out) {
  auto store = ddp::make_hash_store();
  std::vector<std::thread> threads;
  for (int id = 0; id < plan.world; ++id) threads.emplace_back([&, id] { member(plan, id, store, out); });
  for (auto& t : threads) t.join();
}

std::vector<int> survivors(const Plan& plan) {
  std::vector<int> s;
  for (int id = 0; id < plan.world; ++id)
    if (!plan.leave_at.count(id)) s.push_back(id);
  return s;
}

class Lost : public ::testing::TestWithParam<std::tuple<int, int>> {};

// World W loses member V at step 5: the others end in generation 1, members = the rest, every step checked.
TEST_P(Lost, SurvivorsRebuildAndGoOn) {
  const auto [world, victim] = GetParam();
  Plan plan;
  plan.world = world;
  plan.leave_at = {{victim, 5}};
  Outcome out;
  run(plan, out);
  const auto rest = survivors(plan);
  EXPECT_TRUE(out.errors.empty());
  ASSERT_EQ(out.final_members.size(), rest.size());
  for (int id : rest) {
    EXPECT_EQ(out.final_members[id], rest) << "member " << id;
    EXPECT_EQ(out.generations[id], 1) << "member " << id;
    for (int step = 0; step < plan.steps; ++step) EXPECT_TRUE(out.checked.count({id, step})) << id << " " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, Lost,
                         ::testing::Values(std::make_tuple(2, 1), std::make_tuple(2, 0), std::make_tuple(3, 0),
                                           std::make_tuple(3, 1), std::make_tuple(4, 2), std::make_tuple(4, 3)),
                         [](const auto& info) {
                           return "w" + std::to_string(std::get<0>(info.param)) + "_lose" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Membership, TwoLostAtOnce) {
  Plan plan;
  plan.leave_at = {{0, 4}, {2, 4}};
  Outcome out;
  run(plan, out);
  EXPECT_TRUE(out.errors.empty());
  for (int id : {1, 3}) EXPECT_EQ(out.final_members[id], (std::vector<int>{1, 3})) << id;
}

TEST(Membership, LostOneAfterAnother) {
  Plan plan;
  plan.leave_at = {{3, 3}, {1, 7}};
  Outcome out;
  run(plan, out);
  EXPECT_TRUE(out.errors.empty());
  for (int id : {0, 2}) {
    EXPECT_EQ(out.final_members[id], (std::vector<int>{0, 2})) << id;
    EXPECT_EQ(out.generations[id], 2) << id;
  }
}

// A member that leaves without being marked lost is counted lost once `settle` has passed.
TEST(Membership, SilentMemberCountedLostAfterSettle) {
  Plan plan;
  plan.world = 3;
  plan.leave_at = {{1, 2}};
  plan.how = Leave::kSilent;
  Outcome out;
  const auto start = std::chrono::steady_clock::now();
  run(plan, out);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_TRUE(out.errors.empty());
  for (int id : {0, 2}) EXPECT_EQ(out.final_members[id], (std::vector<int>{0, 2})) << id;
}

TEST(Membership, FewerThanMinimumLeftIsAnError) {
  Plan plan;
  plan.world = 3;
  plan.leave_at = {{2, 3}};
  plan.min_world = 3;
  Outcome out;
  run(plan, out);
  ASSERT_EQ(out.errors.size(), 2u);
  for (int id : {0, 1})
    EXPECT_NE(out.errors[id].find("only 2 member(s) left (0,1), fewer than the minimum 3"), std::string::npos)
        << out.errors[id];
}

// A member counted lost that comes back is refused, not let in.
TEST(Membership, MemberCountedLostIsRefused) {
  auto store = ddp::make_hash_store();
  MembershipOptions o;
  o.settle = std::chrono::milliseconds(300);
  std::unique_ptr<Membership> a, b;
  std::thread tb([&] { b = std::make_unique<Membership>(store, 1, 2, o); });
  a = std::make_unique<Membership>(store, 0, 2, o);
  tb.join();
  a->rebuild("test: member 1 is silent");  // member 1 never says it is alive: counted lost after 300 ms
  EXPECT_EQ(a->members(), std::vector<int>{0});
  EXPECT_EQ(a->group()->size(), 1);
  try {
    b->rebuild("test: back too late");
    FAIL() << "member 1 was let back in";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this member was counted lost"), std::string::npos) << e.what();
  }
}

}  // namespace
