// The mpi backend beyond collective results: creation, send/recv, subgroups,
// timeouts and argument errors.
#include <chrono>
#include <climits>
#include <cstdlib>

#include "ddp/dist/backend.h"
#include "mpi_test_util.h"

namespace ddp::mpitest {
namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

TEST(MpiBackend, RankAndSizeComeFromMpi) {
  EXPECT_TRUE(is_backend_available("mpi"));
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_EQ(world().rank(), env_int("OMPI_COMM_WORLD_RANK", 0));
  EXPECT_EQ(world().size(), env_int("OMPI_COMM_WORLD_SIZE", 1));
  EXPECT_EQ(world().timeout(), std::chrono::seconds(60));
}

TEST(MpiBackend, CreateChecksRequestedRankAndSize) {
  const int r = R(), w = W();
  BackendOptions o;
  o.rank = r + 1;
  o.world_size = -1;
  try {
    create_backend("mpi", o);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix(world(), "init"), 0), 0u) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(r + 1)), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(r)), std::string::npos) << msg;
  }
  o.rank = -1;
  o.world_size = w + 2;
  try {
    create_backend("mpi", o);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(w + 2)), std::string::npos) << msg;
    EXPECT_NE(msg.find("has " + std::to_string(w)), std::string::npos) << msg;
  }
  // Matching values (and -1) give a second, independent group over the world.
  o.rank = r;
  o.world_size = w;
  o.timeout = std::chrono::seconds(30);
  GroupPtr second;
  EXPECT_NO_THROW(second = create_backend("mpi", o));
  if (!second) return;  // every rank takes the same path here
  EXPECT_EQ(second->rank(), r);
  EXPECT_EQ(second->size(), w);
  EXPECT_EQ(second->timeout(), std::chrono::seconds(30));
  at::Tensor a = at::full({8}, r + 1.0), b = at::full({8}, 2.0 * (r + 1));
  AllReduceOptions async;
  async.async_op = true;
  Work wa = world().all_reduce(a, async);
  Work wb = second->all_reduce(b, async);
  EXPECT_NO_THROW(wb.wait());
  EXPECT_NO_THROW(wa.wait());
  expect_values(a, at::full({8}, w * (w + 1) / 2.0, at::kDouble), where(world(), "world"));
  expect_values(b, at::full({8}, w * (w + 1.0), at::kDouble), where(*second, "second group"));
}

TEST(MpiBackend, SendRecvRing) {
  const int r = R(), w = W();
  if (w == 1) GTEST_SKIP() << "no peer in a world of one";
  for (auto dt : all_dtypes()) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1 << 20)}) {
      if (n == (1 << 20) && dt != at::kFloat && dt != at::kHalf) continue;  // keep it short
      P2POptions o;
      o.async_op = true;
      o.tag = 7;
      at::Tensor out = (pattern(n) + r).to(dt);
      Work s = world().send(out, (r + 1) % w, o);
      at::Tensor in = at::zeros({n}, dt);
      Work rv = world().recv(in, (r + w - 1) % w, o);
      EXPECT_NO_THROW(rv.wait());
      EXPECT_NO_THROW(s.wait());
      expect_values(in, pattern(n) + (r + w - 1) % w,
                    where(world(), "recv " + std::string(c10::toString(dt)) + " n=" + std::to_string(n)));
    }
  }
}

TEST(MpiBackend, RecvMatchesByTag) {
  const int r = R();
  if (W() == 1) GTEST_SKIP() << "no peer in a world of one";
  P2POptions t1, t2;
  t1.tag = 1;
  t2.tag = 2;
  t1.async_op = t2.async_op = true;
  if (r == 0) {
    at::Tensor a = at::full({4}, 1.0), b = at::full({4}, 2.0);
    Work wa = world().send(a, 1, t1);
    Work wb = world().send(b, 1, t2);
    EXPECT_NO_THROW(wa.wait());
    EXPECT_NO_THROW(wb.wait());
  } else if (r == 1) {
    at::Tensor a = at::zeros({4}), b = at::zeros({4});
    Work wb = world().recv(b, 0, t2);  // posted first, matches the second send
    Work wa = world().recv(a, 0, t1);
    EXPECT_NO_THROW(wa.wait());
    EXPECT_NO_THROW(wb.wait());
    expect_values(a, at::full({4}, 1.0), "tag 1");
    expect_values(b, at::full({4}, 2.0), "tag 2");
  }
  EXPECT_NO_THROW(world().barrier());
}

TEST(MpiBackend, RecvTimesOutAndIsCancelled) {
  const int r = R(), w = W();
  if (w == 1) GTEST_SKIP() << "no peer in a world of one";
  at::Tensor t = at::zeros({16});
  P2POptions o;
  o.tag = 99;
  o.timeout = std::chrono::milliseconds(200);
  auto start = Clock::now();
  try {
    world().recv(t, (r + 1) % w, o);
    ADD_FAILURE() << "expected ddp::TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(std::string(e.what()), prefix(world(), "recv") + "timed out after 200 ms");
  }
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  EXPECT_GE(ms, 190.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_NO_THROW(world().barrier());
  // The timed-out receive was cancelled: a new message on the same tag goes
  // to a new receive.
  P2POptions a;
  a.tag = 99;
  a.async_op = true;
  at::Tensor out = at::full({16}, double(r));
  Work s = world().send(out, (r + w - 1) % w, a);
  at::Tensor in = at::zeros({16});
  EXPECT_NO_THROW(world().recv(in, (r + 1) % w, a).wait(std::chrono::seconds(30)));
  EXPECT_NO_THROW(s.wait());
  expect_values(in, at::full({16}, double((r + 1) % w)), where(world(), "recv after cancel"));
  EXPECT_NO_THROW(world().barrier());
}

TEST(MpiBackend, ShortWaitTimesOutThenWaitingAgainSucceeds) {
  const int r = R(), w = W();
  if (w == 1) GTEST_SKIP() << "no peer in a world of one";
  P2POptions a;
  a.tag = 5;
  a.async_op = true;
  at::Tensor in = at::zeros({8});
  Work rv = world().recv(in, (r + w - 1) % w, a);
  EXPECT_THROW(rv.wait(std::chrono::milliseconds(50)), TimeoutError);  // nothing sent yet
  EXPECT_NO_THROW(world().barrier());
  at::Tensor out = at::full({8}, double(r));
  EXPECT_NO_THROW(world().send(out, (r + 1) % w, a).wait());
  EXPECT_NO_THROW(rv.wait());
  expect_values(in, at::full({8}, double((r + w - 1) % w)), where(world(), "late recv"));
}

TEST(MpiBackend, SubgroupOfEvenRanks) {
  const int r = R(), w = W();
  std::vector<int> evens;
  for (int q = 0; q < w; q += 2) evens.push_back(q);
  GroupPtr sub;
  EXPECT_NO_THROW(sub = world().new_group(evens));
  if (r % 2 == 1) {
    EXPECT_EQ(sub, nullptr);
  } else if (sub) {  // only members use the subgroup
    const int k = sub->size();
    EXPECT_EQ(sub->rank(), r / 2);
    EXPECT_EQ(k, static_cast<int>(evens.size()));
    EXPECT_EQ(sub->backend(), "mpi");
    at::Tensor t = at::full({4}, r + 1.0);
    EXPECT_NO_THROW(sub->all_reduce(t));
    double expected = 0;
    for (int q : evens) expected += q + 1;
    expect_values(t, at::full({4}, expected, at::kDouble), where(*sub, "subgroup all_reduce"));
    // Roots and peers are subgroup ranks: subgroup rank k-1 is world rank 2(k-1).
    BroadcastOptions b;
    b.src = k - 1;
    at::Tensor x = at::full({3}, double(r));
    EXPECT_NO_THROW(sub->broadcast(x, b));
    expect_values(x, at::full({3}, 2.0 * (k - 1)), where(*sub, "subgroup broadcast"));
    if (k > 1) {
      P2POptions p;
      p.async_op = true;
      at::Tensor out = at::full({5}, double(r)), in = at::zeros({5});
      Work s = sub->send(out, (sub->rank() + 1) % k, p);
      EXPECT_NO_THROW(sub->recv(in, (sub->rank() + k - 1) % k, p).wait());
      EXPECT_NO_THROW(s.wait());
      expect_values(in, at::full({5}, 2.0 * ((sub->rank() + k - 1) % k)), where(*sub, "subgroup recv"));
    }
    expect_invalid(*sub, "broadcast", "src", [&] {
      BroadcastOptions bad;
      bad.src = k;
      sub->broadcast(x, bad);
    });
  }
  EXPECT_NO_THROW(world().barrier());
}

TEST(MpiBackend, NewGroupOfAllAndOfOneRank) {
  const int r = R(), w = W();
  std::vector<int> all;
  for (int q = 0; q < w; ++q) all.push_back(q);
  GroupPtr everyone, last;
  EXPECT_NO_THROW(everyone = world().new_group(all));
  EXPECT_NO_THROW(last = world().new_group({w - 1}));
  if (everyone) {
    EXPECT_EQ(everyone->rank(), r);
    at::Tensor t = at::full({2}, 1.0);
    EXPECT_NO_THROW(everyone->all_reduce(t));
    expect_values(t, at::full({2}, double(w)), where(*everyone, "new_group(all)"));
  } else {
    ADD_FAILURE() << "every rank is a member";
  }
  EXPECT_EQ(last != nullptr, r == w - 1);
  if (last) {
    EXPECT_EQ(last->rank(), 0);
    EXPECT_EQ(last->size(), 1);
    at::Tensor t = at::full({2}, 3.0);
    EXPECT_NO_THROW(last->all_reduce(t, op(ReduceOp::AVG)));
    expect_values(t, at::full({2}, 3.0), "group of one");
  }
}

// The checks every backend shares run in the collectives suite (InvalidArguments,
// also on mpi through suite_mp); this one is MPI's own: tags must be in [0, MPI_TAG_UB].
TEST(MpiBackend, InvalidTagThrowsBeforeAnythingIsQueued) {
  ProcessGroup& g = world();
  const int w = W(), r = R();
  at::Tensor t = at::ones({4});
  expect_invalid(g, "recv", "tag", [&] {
    P2POptions o;
    o.tag = -2;
    g.recv(t, w > 1 ? (r + 1) % w : 0, o);
  });
  // The group still works afterwards.
  at::Tensor x = at::full({2}, r + 1.0);
  EXPECT_NO_THROW(g.all_reduce(x));
  expect_values(x, at::full({2}, w * (w + 1) / 2.0), where(g, "after an invalid tag"));
}

TEST(MpiBackend, CountsBeyondIntMaxAreRejected) {
  // Never touched: the allocation stays virtual.
  at::Tensor huge = at::empty({int64_t(INT_MAX) + 1}, at::kByte);
  expect_invalid(world(), "all_reduce", "INT_MAX", [&] { world().all_reduce(huge); });
  expect_invalid(world(), "broadcast", "tensor", [&] { world().broadcast(huge); });
}

}  // namespace
}  // namespace ddp::mpitest
