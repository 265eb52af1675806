// ddp::Membership on threads: members leave (as a killed rank's connections close) and the others rebuild their
// group among themselves and go on; the sums after a rebuild prove who is in the new world.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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
  std::vector<int> join_after;  // a joiner each, starting once a member has done this many steps
};

struct Outcome {
  std::mutex mu;
  std::map<int, std::vector<int>> final_members;  // id -> members it ended with
  std::map<int, int> generations;
  std::map<int, std::string> errors;      // id -> what rebuild() threw
  std::set<std::pair<int, int>> checked;  // (id, step) whose sum was right
  std::atomic<int> progress{0};           // the most steps a member has done
};

MembershipOptions options(const Plan& plan) {
  MembershipOptions o;
  o.timeout = std::chrono::seconds(60);
  o.settle = std::chrono::milliseconds(plan.how == Leave::kSilent ? 1500 : 60000);
  o.min_world = plan.min_world;
  return o;
}

// The step to go on from after a change of members: the highest any completed (a member may have completed the
// failed one; a joiner has completed none).
int agree_on_step(Membership& m, int step) {
  at::Tensor s = at::full({1}, step, at::kLong);
  ddp::AllReduceOptions max;
  max.op = ddp::ReduceOp::MAX;
  m.group()->all_reduce(s, max);
  return static_cast<int>(s.item<int64_t>());
}

// Before each step the members ask whether someone waits to join (rank 0 reads the store, all agree) and admit
// them; then every step all-reduces (id + 1) * (step + 1) and checks the sum against the current members. After a
// rebuild or an admission the members agree on the step to go on from.
void train(const Plan& plan, std::unique_ptr<Membership> m, int step, const ddp::StorePtr& store, Outcome& out) {
  const int id = m->id();
  while (step < plan.steps) {
    auto it = plan.leave_at.find(id);
    if (it != plan.leave_at.end() && it->second == step) {
      m.reset();  // its connections close, as at a kill
      if (plan.how == Leave::kLost) store->set(ddp::membership_keys::lost(id), std::vector<uint8_t>{'x'});
      return;
    }
    try {
      at::Tensor waiting = at::full({1}, m->group()->rank() == 0 ? m->joiners_waiting() : 0, at::kLong);
      ddp::AllReduceOptions max;
      max.op = ddp::ReduceOp::MAX;
      m->group()->all_reduce(waiting, max);
      if (waiting.item<int64_t>() > 0) {
        m->admit();
        step = agree_on_step(*m, step);
        continue;
      }
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
      int seen = out.progress.load();
      while (step > seen && !out.progress.compare_exchange_weak(seen, step)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } catch (const ddp::CommError& e) {
      try {
        m->rebuild(e.what());
      } catch (const ddp::Error& lost) {
        std::lock_guard<std::mutex> lock(out.mu);
        out.errors[id] = lost.what();
        return;
      }
      step = agree_on_step(*m, step);
    }
  }
  std::lock_guard<std::mutex> lock(out.mu);
  out.final_members[id] = m->members();
  out.generations[id] = m->generation();
}

void run(const Plan& plan, Outcome& out) {
  auto store = ddp::make_hash_store();
  std::vector<std::thread> threads;
  for (int id = 0; id < plan.world; ++id)
    threads.emplace_back(
        [&, id] { train(plan, std::make_unique<Membership>(store, id, plan.world, options(plan)), 0, store, out); });
  for (int after : plan.join_after)
    threads.emplace_back([&, after] {
      while (out.progress.load() < after) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto m = Membership::join(store, plan.world, options(plan));
      const int step = agree_on_step(*m, 0);  // as the members do after admitting it
      train(plan, std::move(m), step, store, out);
    });
  for (auto& t : threads) t.join();
}

// No member failed, and each of `members` ended with exactly them, in `generation`.
void expect_ended(Outcome& out, const std::vector<int>& members, int generation) {
  EXPECT_TRUE(out.errors.empty());
  for (int id : members) {
    EXPECT_EQ(out.final_members[id], members) << "member " << id;
    EXPECT_EQ(out.generations[id], generation) << "member " << id;
  }
}

// The first generation of `world` members on `store`, each made on a thread of its own (they meet).
std::vector<std::unique_ptr<Membership>> first_generation(const ddp::StorePtr& store, int world,
                                                          const MembershipOptions& o) {
  std::vector<std::unique_ptr<Membership>> m(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int id = 0; id < world; ++id)
    threads.emplace_back([&, id] { m[static_cast<size_t>(id)] = std::make_unique<Membership>(store, id, world, o); });
  for (auto& t : threads) t.join();
  return m;
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
  expect_ended(out, {0, 2}, 2);
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

// A joiner is admitted at the members' next step boundary: the world grows, the sums count it from there on.
TEST(Membership, AJoinerIsAdmittedAndTheWorldGrows) {
  Plan plan;
  plan.world = 3;
  plan.steps = 30;
  plan.join_after = {5};
  Outcome out;
  run(plan, out);
  expect_ended(out, {0, 1, 2, 3}, 1);
  for (int step = 0; step < plan.steps; ++step) EXPECT_TRUE(out.checked.count({0, step})) << step;
}

// 4 -> 3 -> 4: a member lost, a replacement joins (with the next id, 4), and the sums prove who is in.
TEST(Membership, LostThenReplaced) {
  Plan plan;
  plan.world = 4;
  plan.steps = 40;
  plan.leave_at = {{1, 4}};
  plan.join_after = {10};
  Outcome out;
  run(plan, out);
  expect_ended(out, {0, 2, 3, 4}, 2);
}

// A joiner lost before the members admit it: the admission goes on without it, nobody waits for it.
TEST(Membership, AJoinerLostBeforeItIsAdmittedIsLeftOut) {
  auto store = ddp::make_hash_store();
  auto root = ddp::make_prefix_store(ddp::membership_keys::kRoot, store);
  MembershipOptions o;
  o.settle = std::chrono::seconds(60);
  auto m = first_generation(store, 2, o);
  root->add("joiners", 1);  // joiner id 2 takes its number, writes its id, and is lost
  root->set("joiner/1", std::vector<uint8_t>{'2'});
  store->set(ddp::membership_keys::lost(2), std::vector<uint8_t>{'x'});
  EXPECT_EQ(m[0]->joiners_waiting(), 1);
  std::thread t2([&] { m[1]->admit(); });
  m[0]->admit();
  t2.join();
  for (auto& member : m) {
    EXPECT_EQ(member->members(), (std::vector<int>{0, 1}));
    EXPECT_EQ(member->generation(), 1);
    EXPECT_EQ(member->joiners_waiting(), 0);
  }
}

// A joiner that comes after the members finished gives up (null), and one whose job lost every member fails.
TEST(Membership, AJoinerOfAFinishedOrLostJobGivesUp) {
  auto store = ddp::make_hash_store();
  MembershipOptions o;
  o.timeout = std::chrono::seconds(60);
  auto alone = std::make_unique<Membership>(store, 0, 1, o);
  alone->finish();
  EXPECT_EQ(Membership::join(store, 1, o), nullptr);

  auto lost = ddp::make_hash_store();
  auto member = std::make_unique<Membership>(lost, 0, 1, o);
  member.reset();
  lost->set(ddp::membership_keys::lost(0), std::vector<uint8_t>{'x'});
  try {
    Membership::join(lost, 1, o);
    FAIL() << "joined a job without members";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("there is no running job left to join"), std::string::npos) << e.what();
  }
}

// A member that says it is alive in the next generation, and is lost before its group forms: the others do not
// wait for it (settle is a minute here), they form the generation after without it.
TEST(Membership, MemberLostWhileTheGroupFormsStartsAnotherRound) {
  auto store = ddp::make_hash_store();
  auto root = ddp::make_prefix_store(ddp::membership_keys::kRoot, store);
  MembershipOptions o;
  o.settle = std::chrono::seconds(60);
  auto m = first_generation(store, 4, o);
  std::vector<std::thread> threads;
  m[3].reset();
  root->set("gen/1/alive/3", std::vector<uint8_t>{'1'});  // member 3 joins generation 1's agreement, then is lost
  const auto start = std::chrono::steady_clock::now();
  for (int id = 0; id < 3; ++id) threads.emplace_back([&, id] { m[id]->rebuild("test: member 3 left"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  store->set(ddp::membership_keys::lost(3), std::vector<uint8_t>{'x'});
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not the minute's settle
  for (int id = 0; id < 3; ++id) {
    EXPECT_EQ(m[id]->members(), (std::vector<int>{0, 1, 2})) << id;
    EXPECT_EQ(m[id]->generation(), 2) << id;
    EXPECT_EQ(m[id]->group()->size(), 3);
  }
}

// Two members, 0 and 1, each with options `o0`, `o1`.
std::pair<std::unique_ptr<Membership>, std::unique_ptr<Membership>> pair_of(const ddp::StorePtr& store,
                                                                            const MembershipOptions& o0,
                                                                            const MembershipOptions& o1) {
  std::unique_ptr<Membership> a, b;
  std::thread tb([&] { b = std::make_unique<Membership>(store, 1, 2, o1); });
  a = std::make_unique<Membership>(store, 0, 2, o0);
  tb.join();
  return {std::move(a), std::move(b)};
}

// `m`'s rebuild throws ddp::Error saying `what`.
void expect_refused(Membership& m, const std::string& what) {
  try {
    m.rebuild("test: back too late");
    ADD_FAILURE() << "member " << m.id() << " was let back in";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// A member whose pulse is still (as a stopped process's: here its pulse beats into a store nobody reads) is counted
// lost after `settle`; when it comes back it is refused, not let in.
TEST(Membership, MemberCountedLostIsRefused) {
  auto store = ddp::make_hash_store();
  MembershipOptions o, still = o;
  o.settle = still.settle = std::chrono::milliseconds(300);
  still.pulse_store = ddp::make_hash_store();
  auto [a, b] = pair_of(store, o, still);
  const auto start = std::chrono::steady_clock::now();
  a->rebuild("test: member 1 is silent");  // member 1 never says it is alive
  EXPECT_GE(std::chrono::steady_clock::now() - start, o.settle);
  EXPECT_EQ(a->members(), std::vector<int>{0});
  EXPECT_EQ(a->group()->size(), 1);
  expect_refused(*b,
                 "this member was counted lost while the others rebuilt (its pulse was still for 0.3 s (the "
                 "heartbeat timeout): stopped, or cut off from the store); members now 0");
}

// A member that is alive but slow to come to the rebuild (a long save): its pulse moves, so the others wait for it
// past `settle` (here 4 settles), and everyone goes on together.
TEST(Membership, ASlowMemberWhosePulseMovesIsWaitedFor) {
  auto store = ddp::make_hash_store();
  MembershipOptions o;
  o.settle = std::chrono::seconds(1);
  auto [a, b] = pair_of(store, o, o);
  std::thread slow([&, b = b.get()] {
    std::this_thread::sleep_for(4 * o.settle);
    try {
      b->rebuild("test: member 1 saved for 4 s");
    } catch (const ddp::Error& e) {
      ADD_FAILURE() << e.what();
    }
  });
  a->rebuild("test: member 1 is slow");
  slow.join();
  for (Membership* m : {a.get(), b.get()}) {
    ASSERT_EQ(m->members(), (std::vector<int>{0, 1})) << m->id();
    EXPECT_EQ(m->generation(), 1) << m->id();
  }
  at::Tensor t0 = at::ones({4}), t1 = at::ones({4});
  std::thread sum([&, b = b.get()] { b->group()->all_reduce(t1); });
  a->group()->all_reduce(t0);
  sum.join();
  EXPECT_EQ(t0[3].item<float>(), 2.0f);
}

// Alive but not come within the collective timeout (a member stuck in its own work): counted lost then, and
// refused when it comes.
TEST(Membership, AnAliveMemberThatDoesNotComeWithinTheTimeoutIsCountedLost) {
  auto store = ddp::make_hash_store();
  MembershipOptions o;
  o.settle = std::chrono::milliseconds(500);
  o.timeout = std::chrono::seconds(3);
  auto [a, b] = pair_of(store, o, o);
  const auto start = std::chrono::steady_clock::now();
  a->rebuild("test: member 1 does not come");
  EXPECT_GE(std::chrono::steady_clock::now() - start, o.timeout);
  EXPECT_EQ(a->members(), std::vector<int>{0});
  expect_refused(*b,
                 "this member was counted lost while the others rebuilt (alive, but it did not come within the "
                 "timeout of 3 s); members now 0");
}

// A member waiting in a collective that a peer never joins (the peer stopped, or waits in another collective): once
// the group is given up (here the launcher marks the peer lost; a member rebuilding after a failure does the same)
// the wait ends with a CommError at once instead of after the group's timeout (a minute here), and the rebuild
// lets the old group go without joining its worker, still blocked in it. With the call check on, its own exchange
// is the collective waited in (inside the call); without it, the collective's Work.
TEST(Membership, AWaitInAGroupGivenUpEndsAtOnce) {
  for (bool checked : {false, true}) {
    SCOPED_TRACE(checked ? "call check on" : "call check off");
    auto store = ddp::make_hash_store();
    MembershipOptions o;
    o.timeout = std::chrono::seconds(60);
    auto m = first_generation(store, 2, o);
    m[0]->group()->set_call_check(checked ? ddp::CallCheck::kHash : ddp::CallCheck::kOff);
    const auto start = std::chrono::steady_clock::now();
    std::thread mark([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      store->set(ddp::membership_keys::lost(1), std::vector<uint8_t>{'x'});
    });
    at::Tensor t = at::ones({8});
    ddp::AllReduceOptions async;
    async.async_op = true;
    try {
      m[0]->group()->all_reduce(t, async).wait();  // member 1 never joins it
      ADD_FAILURE() << "the all_reduce completed without member 1";
    } catch (const ddp::TimeoutError& e) {
      ADD_FAILURE() << "waited for the group's timeout: " << e.what();
    } catch (const ddp::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("[gloo] rank 0/2 all_reduce: communication failed: the members gave this "
                                           "group up while this rank waited"),
                std::string::npos)
          << e.what();
    }
    mark.join();
    m[0]->rebuild("test: member 1 was lost");
    EXPECT_EQ(m[0]->members(), std::vector<int>{0});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not the minute's timeout
    m[1].reset();
  }
}

// The same for a collective launched and never waited for (a bucket's, when backward failed first): the rebuild
// does not join the worker blocked in it.
TEST(Membership, ARebuildDoesNotJoinAWorkerBlockedInTheGroupGivenUp) {
  auto store = ddp::make_hash_store();
  MembershipOptions o;
  o.timeout = std::chrono::seconds(60);
  auto m = first_generation(store, 2, o);
  m[0]->group()->set_call_check(ddp::CallCheck::kOff);  // the call is launched, nothing waits in it
  const auto start = std::chrono::steady_clock::now();
  at::Tensor t = at::ones({8});
  ddp::AllReduceOptions async;
  async.async_op = true;
  ddp::Work w = m[0]->group()->all_reduce(t, async);  // member 1 never joins it
  store->set(ddp::membership_keys::lost(1), std::vector<uint8_t>{'x'});
  m[0]->rebuild("test: member 1 was lost");
  EXPECT_EQ(m[0]->members(), std::vector<int>{0});
  EXPECT_FALSE(w.is_completed());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not the minute's timeout
  m[1].reset();
}

}  // namespace
