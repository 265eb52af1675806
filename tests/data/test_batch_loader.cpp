// BatchLoader: batches equal index_select over the indices, drop_last,
// exceptions from the background thread, resuming with skip_batches, and
// determinism whatever the prefetch.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "ddp/data/batch_loader.h"
#include "ddp/dist/device.h"
#include "ddp/dist/errors.h"

namespace ddp::testing {
namespace {

using data::Batch;
using data::BatchLoader;
using data::BatchLoaderOptions;

// Row i of data is (i, i + 0.5, i + 0.25); target i is 100 + i.
const int64_t kN = 23;
at::Tensor rows() { return at::arange(kN, at::kFloat).view({kN, 1}) + at::tensor({0.0f, 0.5f, 0.25f}); }
at::Tensor targets() { return at::arange(kN, at::kLong) + 100; }

std::vector<int64_t> shuffled(uint64_t seed, int64_t n = kN) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor p = at::randperm(n, gen, at::kLong);
  return std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + n);
}

std::vector<Batch> epoch(BatchLoader& loader, std::vector<int64_t> indices, int64_t e, int64_t skip = 0) {
  loader.start_epoch(std::move(indices), e, skip);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(*b);
  return out;
}

// Adds noise from the batch's generator: any difference in seeding shows.
at::Tensor noisy(const at::Tensor& b, at::Generator& gen) { return b + at::rand(b.sizes(), gen); }

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b, size_t from_b = 0) {
  ASSERT_EQ(a.size() + from_b, b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i].data, b[i + from_b].data)) << "batch " << i;
    EXPECT_TRUE(at::equal(a[i].target, b[i + from_b].target)) << "batch " << i;
  }
}

TEST(BatchLoader, BatchesConcatenateToIndexSelect) {
  for (int prefetch : {0, 2}) {
    for (bool drop_last : {false, true}) {
      BatchLoaderOptions o;
      o.batch_size = 5;
      o.drop_last = drop_last;
      o.prefetch = prefetch;
      BatchLoader loader(rows(), targets(), o);
      auto idx = shuffled(1);
      idx.pop_back();  // 22 of the 23 rows: 4 full batches and one of 2
      auto batches = epoch(loader, idx, 0);
      ASSERT_EQ(loader.batches_in_epoch(), drop_last ? 4 : 5);
      ASSERT_EQ(static_cast<int64_t>(batches.size()), loader.batches_in_epoch());
      EXPECT_EQ(batches.back().data.size(0), drop_last ? 5 : 2);
      std::vector<at::Tensor> data, target;
      for (auto& b : batches) {
        data.push_back(b.data);
        target.push_back(b.target);
      }
      at::Tensor used = at::tensor(idx).narrow(0, 0, drop_last ? 20 : 22);
      EXPECT_TRUE(at::equal(at::cat(data), rows().index_select(0, used)));
      EXPECT_TRUE(at::equal(at::cat(target), targets().index_select(0, used)));
      EXPECT_FALSE(loader.next().has_value());  // still at the end
    }
  }
}

TEST(BatchLoader, ExceptionOnBackgroundThreadIsRethrown) {
  for (int prefetch : {0, 2}) {
    BatchLoaderOptions o;
    o.batch_size = 4;
    o.prefetch = prefetch;
    o.augment = [](const at::Tensor& b, at::Generator&) {
      if (b[0][0].item<float>() == 8.0f) throw std::runtime_error("augment failed on the batch starting at row 8");
      return b * 2;
    };
    BatchLoader loader(rows(), targets(), o);
    std::vector<int64_t> idx(kN);
    for (int64_t i = 0; i < kN; ++i) idx[i] = i;
    loader.start_epoch(idx, 0);
    EXPECT_TRUE(at::equal(loader.next()->data, rows().narrow(0, 0, 4) * 2));
    EXPECT_TRUE(loader.next().has_value());
    try {
      loader.next();
      ADD_FAILURE() << "batch 2 did not throw (prefetch " << prefetch << ")";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "augment failed on the batch starting at row 8");
    }
    auto after = loader.next();  // the epoch goes on with batch 3
    ASSERT_TRUE(after.has_value());
    EXPECT_TRUE(at::equal(after->data, rows().narrow(0, 12, 4) * 2));
  }
}

TEST(BatchLoader, SkipBatchesMatchesAnUnskippedRun) {
  BatchLoaderOptions o;
  o.batch_size = 4;
  o.seed = 17;
  o.augment = noisy;
  BatchLoader full(rows(), targets(), o), resumed(rows(), targets(), o);
  auto all = epoch(full, shuffled(2), 3);
  ASSERT_EQ(all.size(), 6u);
  auto rest = epoch(resumed, shuffled(2), 3, 2);
  EXPECT_EQ(rest.size(), 4u);
  expect_same(rest, all, 2);
  EXPECT_TRUE(epoch(resumed, shuffled(2), 3, 6).empty());  // skipping everything: an empty epoch
}

TEST(BatchLoader, PrefetchDoesNotChangeResults) {
  BatchLoaderOptions o;
  o.batch_size = 3;
  o.seed = 5;
  o.augment = noisy;
  std::vector<std::vector<Batch>> runs;
  for (int prefetch : {0, 1, 2, 8}) {
    o.prefetch = prefetch;
    BatchLoader loader(rows(), targets(), o);
    for (int64_t e = 0; e < 2; ++e) runs.push_back(epoch(loader, shuffled(10 + e), e));
  }
  for (size_t r = 2; r < runs.size(); ++r) expect_same(runs[r], runs[r % 2]);
  // Another epoch number (same indices) or another seed gives other augmentations.
  BatchLoader loader(rows(), targets(), o);
  EXPECT_FALSE(at::equal(epoch(loader, shuffled(10), 1)[0].data, runs[0][0].data));
  o.seed = 6;
  BatchLoader reseeded(rows(), targets(), o);
  EXPECT_FALSE(at::equal(epoch(reseeded, shuffled(10), 0)[0].data, runs[0][0].data));
  EXPECT_TRUE(at::equal(epoch(reseeded, shuffled(10), 0)[0].target, runs[0][0].target));
}

// Several workers finish out of order (the slow ones sleep); batches still come in order, equal to one worker's.
TEST(BatchLoader, WorkersAndFetchDoNotChangeResults) {
  BatchLoaderOptions o;
  o.batch_size = 3;
  o.seed = 5;
  o.augment = noisy;
  BatchLoader reference(rows(), targets(), o);
  const auto want = epoch(reference, shuffled(10), 1);
  const at::Tensor x = rows(), y = targets();
  auto fetch = [&](const std::vector<int64_t>& idx, at::Generator& gen) {
    if (idx[0] % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    at::Tensor index = at::tensor(idx, at::kLong);
    return Batch{noisy(x.index_select(0, index), gen), y.index_select(0, index)};
  };
  for (int workers : {1, 2, 4}) {
    o.workers = workers;
    o.prefetch = workers;
    BatchLoader loader(kN, fetch, o);
    expect_same(epoch(loader, shuffled(10), 1), want);
  }
  o.workers = 0;
  EXPECT_THROW(BatchLoader(kN, fetch, o), ddp::InvalidArgument);
}

TEST(BatchLoader, NewEpochDiscardsTheRest) {
  BatchLoaderOptions o;
  o.batch_size = 2;
  o.prefetch = 3;
  o.augment = noisy;
  BatchLoader loader(rows(), targets(), o), fresh(rows(), targets(), o);
  loader.start_epoch(shuffled(1), 0);
  ASSERT_TRUE(loader.next().has_value());
  expect_same(epoch(loader, shuffled(4), 1), epoch(fresh, shuffled(4), 1));
  loader.start_epoch(shuffled(1), 2);  // destroyed with batches in flight: must not hang
}

// augment_epoch sees each batch's epoch (e.g. airbench's flips on odd epochs), with the batch's generator.
TEST(BatchLoader, AugmentEpochGetsTheEpoch) {
  BatchLoaderOptions o;
  o.batch_size = 5;
  o.augment_epoch = [](const at::Tensor& b, at::Generator& gen, int64_t e) { return noisy(b, gen) + 1000.0 * e; };
  BatchLoader loader(rows(), targets(), o);
  BatchLoaderOptions plain = o;
  plain.augment_epoch = nullptr;
  plain.augment = noisy;
  BatchLoader reference(rows(), targets(), plain);
  for (int64_t e : {0, 3}) {
    auto got = epoch(loader, shuffled(2), e), want = epoch(reference, shuffled(2), e);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i].data, want[i].data + 1000.0 * e));
  }
  o.augment = noisy;
  try {
    BatchLoader both(rows(), targets(), o);
    ADD_FAILURE() << "augment and augment_epoch together were accepted";
  } catch (const ddp::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not both"), std::string::npos) << e.what();
  }
}

TEST(BatchLoader, BadArguments) {
  auto invalid = [](auto fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "expected InvalidArgument: " << part;
    } catch (const ddp::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  BatchLoaderOptions o;
  invalid([&] { BatchLoader(rows(), targets().narrow(0, 0, 5), o); }, "targets must have N = data.size(0) = 23 rows");
  o.batch_size = 0;
  invalid([&] { BatchLoader(rows(), targets(), o); }, "batch_size must be >= 1, got 0");
  o.batch_size = 4;
  BatchLoader loader(rows(), targets(), o);
  invalid([&] { loader.next(); }, "before start_epoch");
  invalid([&] { loader.start_epoch({0, 1, 23}, 0); }, "indices[2] = 23 is outside [0, 23)");
  invalid([&] { loader.start_epoch({0, 1, 2, 3, 4}, 0, 3); }, "skip_batches 3 is outside [0, 2]");
  o.augment = [](const at::Tensor& b, at::Generator&) { return b.narrow(0, 0, 1); };
  BatchLoader shrinking(rows(), targets(), o);
  shrinking.start_epoch({0, 1, 2}, 0);
  try {
    shrinking.next();
    ADD_FAILURE() << "augment's wrong size was not reported";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("augment returned sizes [1, 3] for batch 0 of epoch 0; expected 3"),
              std::string::npos)
        << e.what();
  }
}

// pin_memory: batches in pinned memory, pinned on the workers, where a GPU is visible; refused at construction
// where none is (pinned memory is CUDA's), saying so.
TEST(BatchLoader, PinMemoryPinsBatchesForAGpuAndIsRefusedWithoutOne) {
  BatchLoaderOptions o;
  o.batch_size = 4;
  o.pin_memory = true;
  const at::Tensor x = at::arange(24, at::kFloat).reshape({12, 2}), y = at::arange(12, at::kLong);
  if (cuda_device_count() == 0) {
    try {
      BatchLoader loader(x, y, o);
      ADD_FAILURE() << "pin_memory without a GPU was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("BatchLoader: pin_memory needs a GPU"), std::string::npos) << e.what();
    }
    return;
  }
  BatchLoader loader(x, y, o);
  loader.start_epoch({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0);
  while (auto b = loader.next()) {
    EXPECT_TRUE(b->data.is_pinned());
    EXPECT_TRUE(b->target.is_pinned());
  }
}

}  // namespace
}  // namespace ddp::testing
