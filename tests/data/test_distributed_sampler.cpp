// DistributedSampler: PyTorch's examples, Python's exact order (python3-torch
// as the oracle), the exact mode for evaluation, data loader use, resume.
#include <gtest/gtest.h>
#include <torch/data.h>
#include <torch/serialize.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "ddp/data/distributed_sampler.h"
#include "ddp/dist/init.h"

namespace ddp {
namespace {

using V = std::vector<size_t>;

DistributedSampler make(size_t n, int64_t R, int64_t rank, bool shuffle, uint64_t seed = 0, bool drop_last = false,
                        bool exact = false) {
  DistributedSamplerOptions o;
  o.num_replicas = R;
  o.rank = rank;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.exact = exact;
  return DistributedSampler(n, o);
}

TEST(DistributedSampler, UnshuffledPadsFromTheStart) {
  EXPECT_EQ(make(10, 3, 0, false).indices(), (V{0, 3, 6, 9}));
  EXPECT_EQ(make(10, 3, 1, false).indices(), (V{1, 4, 7, 0}));
  EXPECT_EQ(make(10, 3, 2, false).indices(), (V{2, 5, 8, 1}));
  EXPECT_EQ(make(10, 3, 1, false, 0, true).indices(), (V{1, 4, 7}));
  EXPECT_EQ(make(10, 3, 1, false).size(), 4u);
  EXPECT_EQ(make(10, 3, 1, false, 0, true).size(), 3u);
  // Fewer samples than ranks: padding repeats the data set as often as needed.
  EXPECT_EQ(make(2, 5, 4, false).indices(), (V{0}));
  EXPECT_EQ(make(2, 5, 3, false).indices(), (V{1}));
}

TEST(DistributedSampler, MatchesPythonForEveryArgumentCombination) {
  std::string cmd = std::string(DDP_PYTHON " ") + SAMPLER_ORACLE;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char* line = nullptr;
  size_t cap = 0;
  int checked = 0;
  while (getline(&line, &cap, p) > 0) {
    std::istringstream s(line);
    size_t n;
    int64_t R, rank, epoch;
    uint64_t seed;
    int drop_last, shuffle;
    std::string colon;
    s >> n >> R >> rank >> seed >> epoch >> drop_last >> shuffle >> colon;
    V expected;
    for (size_t i; s >> i;) expected.push_back(i);
    auto sampler = make(n, R, rank, shuffle, seed, drop_last);
    sampler.set_epoch(epoch);
    ASSERT_EQ(sampler.indices(), expected)
        << "n=" << n << " R=" << R << " rank=" << rank << " seed=" << seed << " epoch=" << epoch
        << " drop_last=" << drop_last << " shuffle=" << shuffle;
    EXPECT_EQ(sampler.size(), expected.size());
    ++checked;
  }
  free(line);
  EXPECT_EQ(pclose(p), 0) << "the oracle needs python3-torch (scripts/install-deps.sh)";
  EXPECT_EQ(checked, 6 * (1 + 2 + 3 + 4 + 7) * 3 * 2 * 2 * 2);
}

TEST(DistributedSampler, EpochsReshuffleDeterministically) {
  auto a = make(100, 2, 0, true, 5);
  auto b = make(100, 2, 0, true, 5);
  EXPECT_EQ(a.indices(), b.indices());
  auto first = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), first);
  b.set_epoch(1);
  EXPECT_EQ(a.indices(), b.indices());
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheDataSet) {
  for (size_t n : {9, 10, 11}) {
    std::multiset<size_t> seen;
    for (int64_t r = 0; r < 3; ++r)
      for (size_t i : make(n, 3, r, true, 7).indices()) seen.insert(i);
    for (size_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "n=" << n << " index " << i;
    EXPECT_EQ(seen.size(), ((n + 2) / 3) * 3);
  }
}

TEST(DistributedSampler, ExactModeCountsEverySampleOnce) {
  EXPECT_EQ(make(10, 3, 0, false, 0, false, true).indices(), (V{0, 3, 6, 9}));
  EXPECT_EQ(make(10, 3, 1, false, 0, false, true).indices(), (V{1, 4, 7}));
  EXPECT_EQ(make(10, 3, 2, false, 0, false, true).indices(), (V{2, 5, 8}));
  for (size_t n : {0, 1, 2, 10, 101}) {
    for (int64_t R : {1, 2, 3, 4}) {
      std::multiset<size_t> seen;
      size_t total = 0;
      for (int64_t r = 0; r < R; ++r) {
        auto s = make(n, R, r, true, 3, false, true);
        EXPECT_EQ(s.indices().size(), s.size());
        total += s.size();
        for (size_t i : s.indices()) seen.insert(i);
      }
      EXPECT_EQ(total, n);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u);
    }
  }
}

TEST(DistributedSampler, InvalidArgumentsAreNamed) {
  try {
    make(10, 3, 3, true);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3 is out of range [0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make(10, 0, 0, true), std::invalid_argument);
  EXPECT_THROW(make(10, 2, -2, true), std::invalid_argument);
  EXPECT_THROW(make(10, 2, 0, true, 0, true, true), std::invalid_argument);
}

TEST(DistributedSampler, DefaultsComeFromTheDefaultGroup) {
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_BACKEND"}) unsetenv(v);
  // No default group: an error saying what to do, as PyTorch's sampler raises.
  try {
    DistributedSampler s(10);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("call ddp::init_process_group() first"), std::string::npos) << e.what();
  }
  init_process_group();  // no launcher: a world of one
  DistributedSampler s(10);
  EXPECT_EQ(s.options().num_replicas, 1);
  EXPECT_EQ(s.options().rank, 0);
  EXPECT_TRUE(s.options().shuffle);
  EXPECT_EQ(s.size(), 10u);
  destroy_process_group();
}

// A data set whose example i is the tensor {i}.
struct Indices : torch::data::datasets::Dataset<Indices, torch::data::Example<>> {
  size_t n;
  explicit Indices(size_t n) : n(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor({static_cast<int64_t>(i)}), torch::tensor({0})};
  }
  torch::optional<size_t> size() const override { return n; }
};

TEST(DistributedSampler, PlugsIntoTheDataLoader) {
  auto sampler = make(23, 2, 1, true, 11);
  auto expected = sampler.indices();
  auto loader = torch::data::make_data_loader(Indices(23).map(torch::data::transforms::Stack<>()), std::move(sampler),
                                              torch::data::DataLoaderOptions().batch_size(5));
  for (int pass = 0; pass < 2; ++pass) {
    V got;
    for (auto& batch : *loader)
      for (int64_t i = 0; i < batch.data.size(0); ++i)
        got.push_back(static_cast<size_t>(batch.data[i][0].item<int64_t>()));
    EXPECT_EQ(got, expected) << "pass " << pass;
  }
}

TEST(DistributedSampler, SaveAndLoadResumeMidEpoch) {
  auto a = make(50, 2, 0, true, 1);
  a.set_epoch(4);
  a.next(7);
  auto rest = *a.next(100);
  auto b = make(50, 2, 0, true, 1);
  a.set_epoch(4);
  a.next(7);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream buf;
  out.save_to(buf);
  torch::serialize::InputArchive in;
  std::istringstream is(buf.str());
  in.load_from(is);
  b.load(in);
  EXPECT_EQ(b.epoch(), 4);
  EXPECT_EQ(*b.next(100), rest);
  EXPECT_FALSE(b.next(1).has_value());
}

}  // namespace
}  // namespace ddp
