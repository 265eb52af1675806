#include "support/collectives_suite.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

namespace ddp::testing {
namespace {

const std::vector<at::ScalarType> kAllTypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                               at::kInt,   at::kLong,   at::kByte};
const std::vector<int64_t> kCounts = {0, 1, 1000, 1 << 20};

bool is_float(at::ScalarType t) { return at::isFloatingType(t); }

// Large counts only for one float and one integer type, to keep the suite fast.
bool wanted(at::ScalarType t, int64_t n) { return n < (1 << 20) || t == at::kFloat || t == at::kLong; }

std::string where(const ProcessGroup& g, const std::string& what) {
  return g.backend() + " rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + what;
}

void expect_values(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  auto a = actual.to(at::kDouble).reshape({-1});
  auto e = expected.to(at::kDouble).reshape({-1});
  if (a.numel() != e.numel()) {
    ADD_FAILURE() << what << ": " << a.numel() << " elements, expected " << e.numel();
    return;
  }
  if (!at::equal(a, e)) {
    auto bad = (a != e).nonzero();
    int64_t i = bad[0][0].item<int64_t>();
    ADD_FAILURE() << what << ": element " << i << " is " << a[i].item<double>() << ", expected " << e[i].item<double>()
                  << " (" << bad.size(0) << " wrong)";
  }
}

// m_i = 1 + i % 3: makes every element distinct enough to catch misplacement.
at::Tensor pattern(int64_t n) { return at::arange(n, at::kLong).remainder(3).add(1).to(at::kDouble); }

double factorial(int w) { return w <= 1 ? 1.0 : w * factorial(w - 1); }

void all_reduce_arithmetic(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const double s = w * (w + 1) / 2.0;
  for (auto dt : kAllTypes) {
    for (int64_t n : kCounts) {
      if (!wanted(dt, n)) continue;
      auto m = pattern(n);
      struct Case {
        ReduceOp op;
        at::Tensor input, expected;
      };
      std::vector<Case> cases = {
          {ReduceOp::SUM, m * (r + 1), m * s},
          {ReduceOp::MIN, m * (r + 1), m},
          {ReduceOp::MAX, m * (r + 1), m * w},
          {ReduceOp::PRODUCT, at::full({n}, r + 1.0, at::kDouble), at::full({n}, factorial(w), at::kDouble)},
      };
      if (is_float(dt)) cases.push_back({ReduceOp::AVG, m * (r + 1), m * ((w + 1) / 2.0)});
      for (auto& c : cases) {
        at::Tensor t = c.input.to(dt);
        AllReduceOptions o;
        o.op = c.op;
        g.all_reduce(t, o);
        std::ostringstream what;
        what << "all_reduce " << to_string(c.op) << " " << dt << " n=" << n;
        EXPECT_EQ(t.scalar_type(), dt);
        expect_values(t, c.expected, where(g, what.str()));
      }
    }
  }
}

// The group's device (the suites put their tensors there): the CPU for gloo and mpi, the rank's GPU for nccl.
// A tensor there is reduced where it is and stays there.
void on_the_groups_device(ProcessGroup& g) {
  const at::Device d = g.device();
  EXPECT_TRUE(d.is_cpu() || d.is_cuda()) << where(g, "device " + d.str());
  at::Tensor t = at::full({5}, double(g.rank() + 1), at::TensorOptions().device(d));
  g.all_reduce(t);
  EXPECT_EQ(t.device(), d) << where(g, "the result left the group's device");
  EXPECT_TRUE(at::equal(t.cpu(), at::full({5}, g.size() * (g.size() + 1) / 2.0)))
      << where(g, "all_reduce on " + d.str());
}

void all_reduce_bitwise(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (auto dt : {at::kInt, at::kLong, at::kByte}) {
    for (auto op : {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR}) {
      if (!g.supports(op)) {  // refused, clearly, on every rank alike (nccl)
        at::Tensor t = at::zeros({5}, at::kLong).to(dt);
        AllReduceOptions o;
        o.op = op;
        EXPECT_THROW(g.all_reduce(t, o), InvalidArgument) << where(g, to_string(op));
        continue;
      }
      // Rank q contributes v(q) = 0b1000_0001 | (1 << (q + 1)): bit 0 and 7
      // set by all, bit q+1 by rank q alone.
      auto v = [](int q) { return int64_t(0x81) | (int64_t(1) << (q + 1)); };
      int64_t expected = v(0);
      for (int q = 1; q < w; ++q) {
        if (op == ReduceOp::BAND) expected &= v(q);
        if (op == ReduceOp::BOR) expected |= v(q);
        if (op == ReduceOp::BXOR) expected ^= v(q);
      }
      at::Tensor t = at::full({5}, v(r), at::kLong).to(dt);
      AllReduceOptions o;
      o.op = op;
      g.all_reduce(t, o);
      expect_values(t, at::full({5}, expected, at::kLong),
                    where(g, "all_reduce " + to_string(op) + " " + c10::toString(dt)));
    }
  }
}

void broadcast_every_root(ProcessGroup& g) {
  for (int root = 0; root < g.size(); ++root) {
    for (auto dt : kAllTypes) {
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000)}) {
        auto expected = pattern(n) + root * 10;
        at::Tensor t = g.rank() == root ? expected.to(dt) : at::zeros({n}, dt);
        BroadcastOptions o;
        o.src = root;
        g.broadcast(t, o);
        expect_values(t, expected, where(g, "broadcast root " + std::to_string(root) + " " + c10::toString(dt)));
      }
    }
  }
}

void reduce_every_root(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (int root = 0; root < w; ++root) {
    for (auto dt : {at::kFloat, at::kBFloat16, at::kLong}) {
      auto m = pattern(1000);
      at::Tensor t = (m * (r + 1)).to(dt);
      ReduceOptions o;
      o.dst = root;
      g.reduce(t, o);
      if (r == root) expect_values(t, m * (w * (w + 1) / 2.0), where(g, "reduce root " + std::to_string(root)));
    }
  }
}

at::Tensor rank_block(int q, int64_t n, at::ScalarType dt) { return (pattern(n) + 10 * q).to(dt); }

void all_gather_contents(ProcessGroup& g) {
  for (auto dt : kAllTypes) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000)}) {
      std::vector<at::Tensor> outs;
      for (int q = 0; q < g.size(); ++q) outs.push_back(at::zeros({n}, dt));
      g.all_gather(outs, rank_block(g.rank(), n, dt));
      for (int q = 0; q < g.size(); ++q)
        expect_values(outs[q], rank_block(q, n, at::kDouble), where(g, "all_gather from " + std::to_string(q)));
    }
  }
}

void gather_scatter_every_root(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (int root = 0; root < w; ++root) {
    for (auto dt : {at::kFloat, at::kBFloat16, at::kByte, at::kLong}) {
      std::vector<at::Tensor> outs;
      if (r == root)
        for (int q = 0; q < w; ++q) outs.push_back(at::zeros({7}, dt));
      GatherOptions o;
      o.dst = root;
      g.gather(rank_block(r, 7, dt), outs, o);
      if (r == root)
        for (int q = 0; q < w; ++q)
          expect_values(outs[q], rank_block(q, 7, at::kDouble), where(g, "gather root " + std::to_string(root)));

      std::vector<at::Tensor> ins;
      if (r == root)
        for (int q = 0; q < w; ++q) ins.push_back(rank_block(q + root, 9, dt));
      at::Tensor out = at::zeros({9}, dt);
      ScatterOptions so;
      so.src = root;
      g.scatter(out, ins, so);
      expect_values(out, rank_block(r + root, 9, at::kDouble), where(g, "scatter root " + std::to_string(root)));
    }
  }
}

void reduce_scatter_ops(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const double s = w * (w + 1) / 2.0;
  for (auto dt : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000)}) {
      auto m = pattern(n);
      std::vector<std::pair<ReduceOp, at::Tensor>> cases = {
          {ReduceOp::SUM, m * s * (r + 1)}, {ReduceOp::MIN, m * (r + 1)}, {ReduceOp::MAX, m * w * (r + 1)}};
      if (is_float(dt)) cases.push_back({ReduceOp::AVG, m * ((w + 1) / 2.0) * (r + 1)});
      for (auto& [op, expected] : cases) {
        // Rank q's chunk for rank j is m * (q + 1) * (j + 1).
        std::vector<at::Tensor> ins;
        for (int j = 0; j < w; ++j) ins.push_back((m * (r + 1) * (j + 1)).to(dt));
        at::Tensor out = at::zeros({n}, dt);
        ReduceScatterOptions o;
        o.op = op;
        g.reduce_scatter(out, ins, o);
        expect_values(out, expected, where(g, "reduce_scatter " + to_string(op) + " " + c10::toString(dt)));
      }
    }
  }
}

void all_to_all_uneven(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  for (auto dt : {at::kFloat, at::kBFloat16, at::kInt}) {
    // Rank q sends rank j (q + j) elements of value 10q + j: sizes differ per pair, some are empty.
    std::vector<at::Tensor> ins, outs;
    for (int j = 0; j < w; ++j) {
      ins.push_back(at::full({r + j}, 10.0 * r + j, at::kDouble).to(dt));
      outs.push_back(at::full({j + r}, -1.0, at::kDouble).to(dt));
    }
    g.all_to_all(outs, ins);
    for (int j = 0; j < w; ++j)
      expect_values(outs[j], at::full({j + r}, 10.0 * j + r, at::kDouble),
                    where(g, "all_to_all from " + std::to_string(j)));
  }
}

void barrier_and_async(ProcessGroup& g) {
  g.barrier();
  const int r = g.rank(), w = g.size();
  // Several operations in flight at once, waited for in reverse order.
  std::vector<at::Tensor> ts;
  std::vector<Work> works;
  AllReduceOptions o;
  o.async_op = true;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(at::full({1000 * (k + 1)}, double(r + 1 + k), at::kFloat));
    works.push_back(g.all_reduce(ts.back(), o));
  }
  for (int k = 5; k >= 0; --k) {
    works[k].wait();
    EXPECT_TRUE(works[k].is_completed());
    expect_values(ts[k], at::full({1000 * (k + 1)}, w * (w + 1) / 2.0 + w * k, at::kDouble),
                  where(g, "async all_reduce " + std::to_string(k)));
  }
  g.barrier();
}

// Continuations (Work::then) run by themselves once their Work completes, and the collectives they call keep the
// place then() was called at: the user's thread calls the next collective (of another size) before the
// continuation ran on some ranks and after it on others. Out of order, sizes would mismatch across ranks.
at::Tensor f0(int r) { return at::full({8}, r + 1.0); }

void continuations_in_order(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const double s = w * (w + 1) / 2.0;
  AllReduceOptions async;
  async.async_op = true;
  at::Tensor a = at::full({100}, r + 1.0), b = at::full({300}, r + 1.0), c = at::full({500}, r + 1.0);
  at::Tensor d = at::full({700}, r + 1.0);
  std::atomic<bool> ran{false};
  Work chain = g.all_reduce(a, async)
                   .then([&g, &ran, b, r](at::Tensor) mutable {
                     std::this_thread::sleep_for(std::chrono::milliseconds(30 * (r % 2)));  // ranks differ
                     g.all_reduce(b);  // issued before c on every rank
                     ran = true;
                     return b;
                   })
                   .then([&g, d](at::Tensor v) mutable {  // a second continuation: its collective follows b's
                     g.all_reduce(d);
                     return v * 2;
                   });
  // Even ranks call the next collective late (their continuations have run by then), odd ranks at once (theirs
  // sleep first): issued as called, the two would swap places on half the ranks.
  std::this_thread::sleep_for(std::chrono::milliseconds(30 * ((r + 1) % 2)));
  Work third = g.all_reduce(c, async);  // queued behind the continuations where they have not run yet
  // Nobody waits: the continuation runs by itself (the deadline detects a hang, not slowness).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!ran && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(ran.load()) << where(g, "then(): the continuation did not run without a waiter");
  expect_values(chain.value(), at::full({300}, 2 * s, at::kDouble), where(g, "then().then()'s value"));
  third.wait();
  expect_values(a, at::full({100}, s, at::kDouble), where(g, "then(): the first all_reduce"));
  expect_values(b, at::full({300}, s, at::kDouble), where(g, "then(): the continuation's all_reduce"));
  expect_values(c, at::full({500}, s, at::kDouble), where(g, "then(): the all_reduce called after then()"));
  expect_values(d, at::full({700}, s, at::kDouble), where(g, "then(): the second continuation's all_reduce"));
  // Inside a continuation, a synchronous 16-bit all_reduce (over gloo: an all_to_all, then a gather of its own)
  // completes there; an asynchronous one chains behind the continuation. Its result is the tensor's once its Work
  // is waited for, as PyTorch's contract says (a CPU tensor over nccl is copied back from the GPU then).
  at::Tensor h = at::full({64}, r + 1.0).to(at::kHalf), h2 = at::full({96}, r + 1.0).to(at::kBFloat16);
  at::Tensor x1 = f0(r), x2 = f0(r);
  Work inner;
  Work halves = g.all_reduce(x1, async).then([&g, &inner, h, h2, async](at::Tensor) mutable {
    g.all_reduce(h);
    inner = g.all_reduce(h2, async);  // not waited for here
    return h;
  });
  expect_values(halves.value(), at::full({64}, s, at::kDouble), where(g, "then(): a float16 all_reduce inside"));
  at::Tensor after = at::full({5}, r + 1.0);
  g.all_reduce(after);  // behind the bfloat16 one on every rank
  inner.wait();
  expect_values(h2, at::full({96}, s, at::kDouble), where(g, "then(): an async bfloat16 all_reduce inside"));
  expect_values(after, at::full({5}, s, at::kDouble), where(g, "then(): the all_reduce after it"));
  // A continuation that waits for a then() of its own would wait forever: an error says so.
  Work self_wait = g.all_reduce(x2, async).then([&g, async](at::Tensor v) {
    at::Tensor y = v.clone();
    Work inner = g.all_reduce(y, async).then([](at::Tensor t) { return t; });
    return inner.value();
  });
  try {
    self_wait.wait();
    ADD_FAILURE() << where(g, "then(): expected an error for a continuation waiting for its own then()");
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("would wait forever"), std::string::npos) << err.what();
  }
  // An error in a continuation reaches whoever waits; the group goes on.
  at::Tensor e = at::full({10}, r + 1.0);
  Work failing = g.all_reduce(e, async).then([](at::Tensor) -> at::Tensor { throw Error("the continuation failed"); });
  try {
    failing.wait();
    ADD_FAILURE() << where(g, "then(): expected the continuation's error");
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("the continuation failed"), std::string::npos) << err.what();
  }
  at::Tensor f = at::full({3}, r + 1.0);
  g.all_reduce(f);
  expect_values(f, at::full({3}, s, at::kDouble), where(g, "after a failed continuation"));
}

void coalesced_mixed(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  const double s = w * (w + 1) / 2.0;
  std::vector<at::Tensor> ts = {at::full({3, 4}, r + 1.0, at::kFloat), at::full({5}, r + 1.0, at::kDouble),
                                at::full({2, 2}, int64_t(r + 1), at::kLong), at::full({0}, 1.0, at::kFloat),
                                at::full({7}, 2.0 * (r + 1), at::kFloat)};
  g.all_reduce_coalesced(ts);
  expect_values(ts[0], at::full({12}, s, at::kDouble), where(g, "coalesced[0]"));
  expect_values(ts[1], at::full({5}, s, at::kDouble), where(g, "coalesced[1]"));
  expect_values(ts[2], at::full({4}, s, at::kDouble), where(g, "coalesced[2]"));
  EXPECT_EQ(ts[3].numel(), 0);
  expect_values(ts[4], at::full({7}, 2 * s, at::kDouble), where(g, "coalesced[4]"));
  EXPECT_EQ(ts[0].sizes(), (std::vector<int64_t>{3, 4}));
}

void send_recv_ring(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  if (w == 1) return;
  for (auto dt : {at::kFloat, at::kBFloat16, at::kLong}) {
    P2POptions o;
    o.async_op = true;
    o.tag = 7;
    at::Tensor out = (pattern(100) + r).to(dt), in = at::zeros({100}, dt);
    // Even ranks send first, odd ranks receive first: each pair's calls matched in order, as nccl needs
    // (docs/backends.md). In a ring of an odd size the last rank and rank 0 are both even, but their pair has
    // one call each way: the last rank's send, rank 0's receive.
    Work s;
    if (r % 2 == 0) s = g.send(out, (r + 1) % w, o);
    g.recv(in, (r + w - 1) % w, o).wait();
    if (r % 2 == 1) s = g.send(out, (r + 1) % w, o);
    s.wait();
    expect_values(in, pattern(100) + (r + w - 1) % w, where(g, "recv"));
  }
}

void object_collectives(ProcessGroup& g) {
  GroupPtr gp = g.shared_from_this();
  const int r = g.rank(), w = g.size();
  auto names = all_gather_object<std::string>(std::string(r + 1, 'a' + r), gp);
  EXPECT_EQ(static_cast<int>(names.size()), w);
  for (int q = 0; q < w && q < static_cast<int>(names.size()); ++q) EXPECT_EQ(names[q], std::string(q + 1, 'a' + q));
  for (int root = 0; root < w; ++root) {
    c10::Dict<std::string, int64_t> d;
    d.insert("root", root);
    d.insert("rank", r);
    auto got = broadcast_object(c10::IValue(d), root, gp).toGenericDict();
    EXPECT_EQ(got.at("root").toInt(), root);
    EXPECT_EQ(got.at("rank").toInt(), root);
  }
  auto tensors = all_gather_object<at::Tensor>(at::full({2}, double(r)), gp);
  for (int q = 0; q < w && q < static_cast<int>(tensors.size()); ++q)
    expect_values(tensors[q], at::full({2}, double(q), at::kDouble), where(g, "all_gather_object tensor"));
  for (int root = 0; root < w; ++root) {
    // src's list (of its own length) replaces every rank's.
    std::vector<c10::IValue> list;
    if (r == root)
      list = {c10::IValue(int64_t(root)), c10::IValue(std::string(root + 2, 'x')), c10::IValue(1.5)};
    else
      list = {c10::IValue(int64_t(-1))};
    broadcast_object_list(list, root, gp);
    ASSERT_EQ(list.size(), 3u) << where(g, "broadcast_object_list");
    EXPECT_EQ(list[0].toInt(), root);
    EXPECT_EQ(list[1].toStringRef(), std::string(root + 2, 'x'));
    EXPECT_EQ(list[2].toDouble(), 1.5);
    // Every rank's object (of a size of its own) at dst, nothing elsewhere.
    auto gathered = gather_object(c10::IValue(std::string(3 * r + 1, 'a' + r)), root, gp);
    ASSERT_EQ(gathered.size(), r == root ? size_t(w) : 0u) << where(g, "gather_object");
    for (int q = 0; q < static_cast<int>(gathered.size()); ++q)
      EXPECT_EQ(gathered[q].toStringRef(), std::string(3 * q + 1, 'a' + q));
    // Rank q gets src's objects[q].
    std::vector<c10::IValue> parts;
    for (int q = 0; q < w && r == root; ++q) parts.push_back(c10::IValue(std::vector<int64_t>(q + 1, 10 * root + q)));
    auto mine = scatter_object_list(parts, root, gp).toIntVector();
    EXPECT_EQ(mine, std::vector<int64_t>(r + 1, 10 * root + r)) << where(g, "scatter_object_list");
  }
}

// Every rank arrives: nobody throws. (A missing rank: test_init's Timeouts.)
void monitored_barrier_all_arrive(ProcessGroup& g) {
  GroupPtr gp = g.shared_from_this();
  for (bool all : {false, true}) EXPECT_NO_THROW(monitored_barrier(gp, std::chrono::seconds(60), all));
  at::Tensor t = at::ones({2});
  g.all_reduce(t);  // the group works as before
  EXPECT_EQ(t[0].item<float>(), g.size());
}

void subgroup_of_even_ranks(ProcessGroup& g) {
  const int r = g.rank(), w = g.size();
  std::vector<int> evens;
  for (int q = 0; q < w; q += 2) evens.push_back(q);
  GroupPtr sub = g.new_group(evens);
  if (r % 2 == 1) {
    EXPECT_EQ(sub, nullptr);
  } else if (sub) {
    EXPECT_EQ(sub->rank(), r / 2);
    EXPECT_EQ(sub->size(), static_cast<int>(evens.size()));
    at::Tensor t = at::full({4}, r + 1.0);
    sub->all_reduce(t);
    double expected = 0;
    for (int q : evens) expected += q + 1;
    expect_values(t, at::full({4}, expected, at::kDouble), where(g, "subgroup all_reduce"));
  } else {
    ADD_FAILURE() << where(g, "member of the subgroup got nullptr");
  }
  // Everyone goes on together: no rank tears its group down while others
  // are still connecting their subgroup (with ranks as threads of one
  // process, gloo once failed that rendezvous under load).
  g.barrier();
}

template <typename Fn>
void expect_invalid(ProcessGroup& g, const std::string& op, const std::string& needle, Fn&& fn) {
  std::string prefix =
      "[" + g.backend() + "] rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + " " + op + ": ";
  try {
    fn();
    ADD_FAILURE() << where(g, op) << ": expected std::invalid_argument mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "message '" << msg << "' should start with '" << prefix << "'";
    EXPECT_NE(msg.find(needle), std::string::npos) << "message '" << msg << "' should mention '" << needle << "'";
  }
}

void invalid_arguments(ProcessGroup& g) {
  const int w = g.size(), r = g.rank();
  at::Tensor t = at::ones({4});
  expect_invalid(g, "broadcast", "src " + std::to_string(w), [&] {
    BroadcastOptions o;
    o.src = w;
    g.broadcast(t, o);
  });
  expect_invalid(g, "reduce", "dst -1", [&] {
    ReduceOptions o;
    o.dst = -1;
    g.reduce(t, o);
  });
  expect_invalid(g, "gather", "dst " + std::to_string(w + 3), [&] {
    std::vector<at::Tensor> outs;
    GatherOptions o;
    o.dst = w + 3;
    g.gather(t, outs, o);
  });
  expect_invalid(g, "all_reduce", "BAND", [&] { g.all_reduce(t, op(ReduceOp::BAND)); });
  expect_invalid(g, "all_reduce", "BXOR", [&] {
    at::Tensor h = at::ones({4}, at::kHalf);
    g.all_reduce(h, op(ReduceOp::BXOR));
  });
  expect_invalid(g, "all_reduce", "AVG", [&] {
    at::Tensor i = at::ones({4}, at::kInt);
    g.all_reduce(i, op(ReduceOp::AVG));
  });
  expect_invalid(g, "all_reduce", "contiguous", [&] {
    at::Tensor nc = at::ones({4, 4}).t();
    g.all_reduce(nc);
  });
  expect_invalid(g, "all_reduce", "dtype", [&] {
    at::Tensor b = at::ones({4}, at::kBool);
    g.all_reduce(b);
  });
  expect_invalid(g, "all_reduce", "undefined", [&] {
    at::Tensor u;
    g.all_reduce(u);
  });
  expect_invalid(g, "all_gather", "outputs", [&] {
    std::vector<at::Tensor> outs(w + 1, at::ones({4}));
    g.all_gather(outs, t);
  });
  expect_invalid(g, "all_gather", "outputs[0]", [&] {
    std::vector<at::Tensor> outs(w, at::ones({4}, at::kDouble));
    g.all_gather(outs, t);
  });
  expect_invalid(g, "scatter", "inputs", [&] {
    std::vector<at::Tensor> ins(w, at::ones({5}));
    ScatterOptions o;
    o.src = r;  // only the source checks its inputs
    g.scatter(t, ins, o);
  });
  expect_invalid(g, "reduce_scatter", "inputs[0]", [&] {
    std::vector<at::Tensor> ins(w, at::ones({5}));
    g.reduce_scatter(t, ins);
  });
  if (w > 1)
    expect_invalid(g, "all_to_all", "inputs[" + std::to_string(w - 1) + "]", [&] {
      std::vector<at::Tensor> ins(w, at::ones({2})), outs(w, at::ones({2}));
      ins[w - 1] = at::ones({2}, at::kLong);
      g.all_to_all(outs, ins);
    });
  expect_invalid(g, "all_to_all", "outputs[" + std::to_string(w - 1) + "]", [&] {
    std::vector<at::Tensor> ins(w, at::ones({2})), outs(w, at::ones({2}));
    outs[w - 1] = at::ones({2}, at::kLong);
    g.all_to_all(outs, ins);
  });
  expect_invalid(g, "all_to_all", "outputs", [&] {
    std::vector<at::Tensor> ins(w, at::ones({2})), outs(w + 1, at::ones({2}));
    g.all_to_all(outs, ins);
  });
  expect_invalid(g, "send", "dst", [&] { g.send(t, w); });
  expect_invalid(g, "send", "this rank", [&] { g.send(t, r); });
  expect_invalid(g, "recv", "src", [&] { g.recv(t, -1); });
  expect_invalid(g, "new_group", "sorted", [&] { g.new_group({0, 0}); });
  expect_invalid(g, "new_group", "ranks[0]", [&] { g.new_group({w}); });
  expect_invalid(g, "new_group", "empty", [&] { g.new_group({}); });
  expect_invalid(g, "all_reduce_coalesced", "tensors[1]", [&] {
    std::vector<at::Tensor> ts = {at::ones({2}), at::ones({2, 2}).t()};
    g.all_reduce_coalesced(ts);
  });
  // The group still works after all of these.
  at::Tensor x = at::full({2}, r + 1.0);
  g.all_reduce(x);
  expect_values(x, at::full({2}, w * (w + 1) / 2.0), where(g, "after invalid arguments"));
}

}  // namespace

const std::vector<SuiteCase>& collectives_suite() {
  static const std::vector<SuiteCase> cases = {
      {"AllReduceArithmetic", all_reduce_arithmetic},
      {"OnTheGroupsDevice", on_the_groups_device},
      {"AllReduceBitwise", all_reduce_bitwise},
      {"BroadcastEveryRoot", broadcast_every_root},
      {"ReduceEveryRoot", reduce_every_root},
      {"AllGather", all_gather_contents},
      {"GatherScatterEveryRoot", gather_scatter_every_root},
      {"ReduceScatter", reduce_scatter_ops},
      {"AllToAllUneven", all_to_all_uneven},
      {"BarrierAndAsync", barrier_and_async},
      {"ContinuationsInOrder", continuations_in_order},
      {"CoalescedMixedDtypes", coalesced_mixed},
      {"SendRecvRing", send_recv_ring},
      {"ObjectCollectives", object_collectives},
      {"MonitoredBarrier", monitored_barrier_all_arrive},
      {"SubgroupOfEvenRanks", subgroup_of_even_ranks},
      {"InvalidArguments", invalid_arguments},
  };
  return cases;
}

}  // namespace ddp::testing
