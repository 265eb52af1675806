// Results of every collective, exact and in closed form: rank r contributes
// (r + 1) * pattern, so SUM = W(W+1)/2, PRODUCT = W!, MIN = 1, MAX = W,
// AVG = (W+1)/2 (times the pattern).
#include "mpi_test_util.h"

namespace ddp::mpitest {
namespace {

const std::vector<int64_t> kCounts = {0, 1, 1000, 1 << 20};

double factorial(int w) { return w <= 1 ? 1.0 : w * factorial(w - 1); }

// Outside all_reduce, 1 << 20 elements only for one float and one integer
// dtype, to keep the run short with 4 ranks on 2 cores.
bool wanted(at::ScalarType dt, int64_t n) { return n < (1 << 20) || dt == at::kFloat || dt == at::kLong; }

std::string name(ReduceOp op, at::ScalarType dt, int64_t n) {
  return to_string(op) + " " + c10::toString(dt) + " n=" + std::to_string(n);
}

TEST(MpiCollectives, AllReduceEveryOpDtypeAndCount) {
  const int r = R(), w = W();
  const double sum = w * (w + 1) / 2.0;
  for (auto dt : all_dtypes()) {
    for (int64_t n : kCounts) {
      at::Tensor m = pattern(n);
      struct Case {
        ReduceOp op;
        at::Tensor input, expected;
      };
      std::vector<Case> cases = {
          {ReduceOp::SUM, m * (r + 1), m * sum},
          {ReduceOp::MIN, m * (r + 1), m},
          {ReduceOp::MAX, m * (r + 1), m * w},
          {ReduceOp::PRODUCT, at::full({n}, r + 1.0, at::kDouble), at::full({n}, factorial(w), at::kDouble)},
      };
      if (is_float(dt)) cases.push_back({ReduceOp::AVG, m * (r + 1), m * ((w + 1) / 2.0)});
      for (auto& c : cases) {
        at::Tensor t = c.input.to(dt);
        const void* before = t.data_ptr();
        EXPECT_NO_THROW(world().all_reduce(t, op(c.op)));
        EXPECT_EQ(t.data_ptr(), before) << "all_reduce works in place";
        EXPECT_EQ(t.scalar_type(), dt);
        expect_values(t, c.expected, where(world(), "all_reduce " + name(c.op, dt, n)));
      }
    }
  }
}

TEST(MpiCollectives, AllReduceBitwiseOnIntegers) {
  const int r = R(), w = W();
  // Rank q contributes 0b1000_0001 | 1 << (q + 1): bits 0 and 7 from all ranks.
  auto v = [](int q) { return int64_t(0x81) | (int64_t(1) << (q + 1)); };
  for (auto dt : {at::kInt, at::kLong, at::kByte}) {
    for (auto o : {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR}) {
      int64_t expected = v(0);
      for (int q = 1; q < w; ++q)
        expected = o == ReduceOp::BAND ? expected & v(q) : o == ReduceOp::BOR ? expected | v(q) : expected ^ v(q);
      for (int64_t n : {int64_t(0), int64_t(5), int64_t(1 << 20)}) {
        at::Tensor t = at::full({n}, v(r), at::kLong).to(dt);
        EXPECT_NO_THROW(world().all_reduce(t, op(o)));
        expect_values(t, at::full({n}, expected, at::kLong), where(world(), "all_reduce " + name(o, dt, n)));
      }
    }
  }
}

TEST(MpiCollectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < W(); ++root) {
    for (auto dt : all_dtypes()) {
      for (int64_t n : kCounts) {
        if (!wanted(dt, n)) continue;
        at::Tensor expected = pattern(n) + root * 10;
        at::Tensor t = R() == root ? expected.to(dt) : at::zeros({n}, dt);
        BroadcastOptions o;
        o.src = root;
        EXPECT_NO_THROW(world().broadcast(t, o));
        expect_values(t, expected,
                      where(world(), "broadcast root " + std::to_string(root) + " " + c10::toString(dt) +
                                         " n=" + std::to_string(n)));
      }
    }
  }
}

TEST(MpiCollectives, ReduceToEveryRoot) {
  const int r = R(), w = W();
  for (int root = 0; root < w; ++root) {
    for (auto dt : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kByte}) {
      for (auto o : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::PRODUCT, ReduceOp::AVG}) {
        if (o == ReduceOp::AVG && !is_float(dt)) continue;
        at::Tensor m = pattern(1000);
        at::Tensor in = o == ReduceOp::PRODUCT ? at::full({1000}, r + 1.0, at::kDouble) : m * (r + 1);
        at::Tensor expected = o == ReduceOp::SUM   ? m * (w * (w + 1) / 2.0)
                              : o == ReduceOp::MAX ? m * w
                              : o == ReduceOp::AVG ? m * ((w + 1) / 2.0)
                                                   : at::full({1000}, factorial(w), at::kDouble);
        at::Tensor t = in.to(dt);
        ReduceOptions opts;
        opts.dst = root;
        opts.op = o;
        EXPECT_NO_THROW(world().reduce(t, opts));
        if (r == root)
          expect_values(t, expected, where(world(), "reduce root " + std::to_string(root) + " " + name(o, dt, 1000)));
      }
    }
  }
}

at::Tensor block(int q, int64_t n, at::ScalarType dt) { return (pattern(n) + 10 * q).to(dt); }

TEST(MpiCollectives, AllGatherIntoSeparateAndChunkedOutputs) {
  const int w = W();
  for (auto dt : all_dtypes()) {
    for (int64_t n : kCounts) {
      if (!wanted(dt, n)) continue;
      std::vector<at::Tensor> outs;
      for (int q = 0; q < w; ++q) outs.push_back(at::zeros({n}, dt));
      EXPECT_NO_THROW(world().all_gather(outs, block(R(), n, dt)));
      for (int q = 0; q < w; ++q)
        expect_values(outs[q], block(q, n, at::kDouble), where(world(), "all_gather from " + std::to_string(q)));
    }
  }
  // Chunks of one tensor (MPI writes them directly), also with the input
  // being this rank's own chunk.
  for (bool aliased : {false, true}) {
    at::Tensor flat = at::zeros({w * 1000}, at::kFloat);
    std::vector<at::Tensor> outs = flat.chunk(w);
    at::Tensor in = block(R(), 1000, at::kFloat);
    if (aliased) {
      outs[R()].copy_(in);
      in = outs[R()];
    }
    EXPECT_NO_THROW(world().all_gather(outs, in));
    for (int q = 0; q < w; ++q)
      expect_values(flat.narrow(0, q * 1000, 1000), block(q, 1000, at::kDouble),
                    where(world(), std::string("all_gather chunked") + (aliased ? " aliased" : "")));
  }
}

TEST(MpiCollectives, GatherAndScatterWithEveryRoot) {
  const int r = R(), w = W();
  for (int root = 0; root < w; ++root) {
    GatherOptions o;
    o.dst = root;
    ScatterOptions so;
    so.src = root;
    for (auto dt : all_dtypes()) {
      for (int64_t n : {int64_t(0), int64_t(7), int64_t(1 << 20)}) {
        if (!wanted(dt, n)) continue;
        std::vector<at::Tensor> outs;
        if (r == root)
          for (int q = 0; q < w; ++q) outs.push_back(at::zeros({n}, dt));
        EXPECT_NO_THROW(world().gather(block(r, n, dt), outs, o));
        if (r == root)
          for (int q = 0; q < w; ++q)
            expect_values(outs[q], block(q, n, at::kDouble), where(world(), "gather root " + std::to_string(root)));

        std::vector<at::Tensor> ins;
        if (r == root)
          for (int q = 0; q < w; ++q) ins.push_back(block(q + root, n, dt));
        at::Tensor out = at::zeros({n}, dt);
        EXPECT_NO_THROW(world().scatter(out, ins, so));
        expect_values(out, block(r + root, n, at::kDouble), where(world(), "scatter root " + std::to_string(root)));
      }
    }
  }
}

TEST(MpiCollectives, ReduceScatterEveryOp) {
  const int r = R(), w = W();
  const double sum = w * (w + 1) / 2.0;
  for (auto dt : all_dtypes()) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000)}) {
      at::Tensor m = pattern(n);
      // Rank q's chunk for rank j is m * (q + 1) * (j + 1).
      std::vector<std::pair<ReduceOp, at::Tensor>> cases = {
          {ReduceOp::SUM, m * sum * (r + 1)}, {ReduceOp::MIN, m * (r + 1)}, {ReduceOp::MAX, m * w * (r + 1)}};
      if (is_float(dt)) cases.push_back({ReduceOp::AVG, m * ((w + 1) / 2.0) * (r + 1)});
      for (auto& [o, expected] : cases) {
        std::vector<at::Tensor> ins;
        for (int j = 0; j < w; ++j) ins.push_back((m * (R() + 1) * (j + 1)).to(dt));
        at::Tensor out = at::zeros({n}, dt);
        ReduceScatterOptions opts;
        opts.op = o;
        EXPECT_NO_THROW(world().reduce_scatter(out, ins, opts));
        expect_values(out, expected, where(world(), "reduce_scatter " + name(o, dt, n)));
      }
    }
  }
  // Inputs as chunks of one tensor (used directly) and PRODUCT on integers.
  at::Tensor flat = at::full({w * 100}, int64_t(r + 1), at::kLong);
  std::vector<at::Tensor> ins = flat.chunk(w);
  at::Tensor out = at::zeros({100}, at::kLong);
  ReduceScatterOptions opts;
  opts.op = ReduceOp::PRODUCT;
  EXPECT_NO_THROW(world().reduce_scatter(out, ins, opts));
  expect_values(out, at::full({100}, factorial(w), at::kDouble), where(world(), "reduce_scatter PRODUCT chunked"));
}

TEST(MpiCollectives, AllToAllWithUnequalSizes) {
  const int r = R(), w = W();
  for (auto dt : all_dtypes()) {
    // Rank q sends rank j (q + 2j) % 5 * 1000 elements of value 10q + j: sizes
    // differ per pair and some are empty.
    auto count = [](int q, int j) { return int64_t((q + 2 * j) % 5) * 1000; };
    std::vector<at::Tensor> ins, outs;
    for (int j = 0; j < w; ++j) {
      ins.push_back(at::full({count(r, j)}, 10.0 * r + j, at::kDouble).to(dt));
      outs.push_back(at::full({count(j, r)}, -1.0, at::kDouble).to(dt));
    }
    EXPECT_NO_THROW(world().all_to_all(outs, ins));
    for (int j = 0; j < w; ++j)
      expect_values(outs[j], at::full({count(j, r)}, 10.0 * j + r, at::kDouble),
                    where(world(), "all_to_all " + std::string(c10::toString(dt)) + " from " + std::to_string(j)));
  }
  // Equal sizes as chunks of one tensor on both sides.
  at::Tensor in = at::arange(w * 3, at::kInt) + 100 * r;
  at::Tensor out = at::zeros({w * 3}, at::kInt);
  std::vector<at::Tensor> ins = in.chunk(w), outs = out.chunk(w);
  EXPECT_NO_THROW(world().all_to_all(outs, ins));
  for (int j = 0; j < w; ++j)
    expect_values(outs[j], at::arange(3, at::kInt) + 3 * r + 100 * j,
                  where(world(), "all_to_all chunked from " + std::to_string(j)));
}

TEST(MpiCollectives, CoalescedAllReduceOfMixedDtypes) {
  const int r = R(), w = W();
  const double s = w * (w + 1) / 2.0;
  std::vector<at::Tensor> ts = {at::full({3, 4}, r + 1.0, at::kFloat),       at::full({5}, r + 1.0, at::kDouble),
                                at::full({2, 2}, int64_t(r + 1), at::kLong), at::full({0}, 1.0, at::kFloat),
                                at::full({6}, r + 1.0, at::kHalf),           at::full({3}, r + 1.0, at::kBFloat16),
                                at::full({7}, 2.0 * (r + 1), at::kFloat),    at::full({9}, int64_t(r + 1), at::kByte)};
  EXPECT_NO_THROW(world().all_reduce_coalesced(ts));
  const std::vector<double> factor = {1, 1, 1, 1, 1, 1, 2, 1};
  for (size_t i = 0; i < ts.size(); ++i)
    expect_values(ts[i], at::full({ts[i].numel()}, factor[i] * s, at::kDouble),
                  where(world(), "coalesced[" + std::to_string(i) + "]"));
  EXPECT_EQ(ts[0].sizes(), (std::vector<int64_t>{3, 4}));

  std::vector<at::Tensor> avg = {at::full({4}, r + 1.0, at::kFloat), at::full({2}, r + 1.0, at::kBFloat16)};
  EXPECT_NO_THROW(world().all_reduce_coalesced(avg, op(ReduceOp::AVG)));
  for (auto& t : avg)
    expect_values(t, at::full({t.numel()}, (w + 1) / 2.0, at::kDouble), where(world(), "coalesced AVG"));
}

TEST(MpiCollectives, AsyncOperationsOverlap) {
  const int r = R(), w = W();
  std::vector<at::Tensor> ts;
  std::vector<Work> works;
  AllReduceOptions o;
  o.async_op = true;
  BroadcastOptions b;
  b.async_op = true;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(at::full({1000 * (k + 1)}, double(r + 1 + k), at::kFloat));
    works.push_back(world().all_reduce(ts.back(), o));
    b.src = k % w;
    ts.push_back(at::full({50}, double(R() == b.src ? k : -1), at::kDouble));
    works.push_back(world().broadcast(ts.back(), b));
  }
  for (int k = 7; k >= 0; --k) {
    EXPECT_NO_THROW(works[2 * k + 1].wait());
    EXPECT_NO_THROW(works[2 * k].wait());
    EXPECT_TRUE(works[2 * k].is_completed());
    expect_values(ts[2 * k], at::full({1000 * (k + 1)}, w * (w + 1) / 2.0 + w * k, at::kDouble),
                  where(world(), "async all_reduce " + std::to_string(k)));
    expect_values(ts[2 * k + 1], at::full({50}, double(k), at::kDouble),
                  where(world(), "async broadcast " + std::to_string(k)));
  }
  // A synchronous call returns a completed Work.
  at::Tensor t = at::ones({3});
  Work done = world().all_reduce(t);
  EXPECT_TRUE(done.is_completed());
  EXPECT_NO_THROW(world().barrier());
}

}  // namespace
}  // namespace ddp::mpitest
