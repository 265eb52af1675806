// The training data after a change of world (in-place recovery, src/train/train_data.h): every world trains the
// launch world's epoch, each global batch split over its ranks. Samples carry their index as the target, so the
// ranks' batches show which samples each micro-batch holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "support/rank_threads.h"
#include "train/train_data.h"

namespace ddp::train::detail {
namespace {

constexpr int64_t kSamples = 50, kBatch = 3, kLaunchWorld = 4, kEpoch = 1;

Task indexed_task() {
  Task t;
  t.train = TensorData{at::arange(kSamples, at::kFloat).unsqueeze(1), at::arange(kSamples, at::kLong)};
  return t;
}

struct Epoch {
  std::map<int64_t, std::vector<int64_t>> micro;  // micro-batch -> the samples of all ranks' batches, sorted
  std::map<int, int64_t> batch;                   // rank -> its samples per micro-batch
  std::map<int, double> scale;                    // rank -> its loss scale
  int64_t micro_per_epoch = 0;
};

// Every rank of a world of `world` trains epoch kEpoch from micro-batch `from` (launch_world 0: the plain sampler).
Epoch run(int world, int launch_world, int64_t from = 0) {
  Epoch e;
  std::mutex mu;
  testing::run_ranks("gloo", world, [&](ProcessGroup& g) {
    TrainDataOptions o;
    o.batch_size = kBatch;
    o.seed = 7;
    o.launch_world = launch_world;
    TrainData data(indexed_task(), o, g);
    data.start_epoch(kEpoch, from);
    std::lock_guard<std::mutex> lock(mu);
    e.batch[g.rank()] = data.batch_size();
    e.scale[g.rank()] = data.loss_scale();
    e.micro_per_epoch = data.micro_per_epoch();
    for (int64_t m = from; auto b = data.next(); ++m) {
      EXPECT_EQ(b->target.size(0), data.batch_size());
      auto& all = e.micro[m];
      for (int64_t i = 0; i < b->target.size(0); ++i) all.push_back(b->target[i].item<int64_t>());
      std::sort(all.begin(), all.end());
    }
  });
  return e;
}

TEST(TrainDataWorlds, EveryWorldTrainsTheLaunchWorldsGlobalBatches) {
  const Epoch launch = run(kLaunchWorld, 0);  // DistributedSampler's epoch at the launch world
  ASSERT_EQ(launch.micro_per_epoch, 4);       // 50 samples padded to 52, 13 per rank, 4 batches of 3
  ASSERT_EQ(launch.micro.size(), 4u);
  for (int world : {4, 3, 2, 1}) {
    const Epoch e = run(world, kLaunchWorld);
    EXPECT_EQ(e.micro_per_epoch, launch.micro_per_epoch) << "world " << world;
    EXPECT_EQ(e.micro, launch.micro) << "world " << world;  // the same samples in every micro-batch
    int64_t total = 0;
    double scaled = 0;
    for (int r = 0; r < world; ++r) {
      const int64_t want = kBatch * kLaunchWorld / world + (r < kBatch * kLaunchWorld % world ? 1 : 0);
      EXPECT_EQ(e.batch.at(r), want) << "world " << world << " rank " << r;
      EXPECT_DOUBLE_EQ(e.scale.at(r), double(want) * world / double(kBatch * kLaunchWorld));
      total += e.batch.at(r);
      scaled += e.scale.at(r) / world;  // the averaged gradient's weights sum to one
    }
    EXPECT_EQ(total, kBatch * kLaunchWorld);
    EXPECT_DOUBLE_EQ(scaled, 1.0);
  }
}

TEST(TrainDataWorlds, AWorldTakingOverMidEpochTrainsTheRestOfIt) {
  const Epoch launch = run(kLaunchWorld, 0);
  const Epoch rest = run(3, kLaunchWorld, 2);
  ASSERT_EQ(rest.micro.size(), 2u);
  for (int64_t m : {2, 3}) EXPECT_EQ(rest.micro.at(m), launch.micro.at(m)) << "micro-batch " << m;
}

TEST(TrainDataWorlds, ShardedDataCannotChangeWorlds) {
  testing::run_ranks("gloo", 2, [](ProcessGroup& g) {
    Task t;
    t.train = TensorData::shard(at::zeros({10, 1}), at::zeros({10}, at::kLong), 20);
    TrainDataOptions o;
    o.batch_size = 2;
    o.launch_world = 2;
    try {
      TrainData data(t, o, g);
      ADD_FAILURE() << "sharded data accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("needs the whole training set on every rank"), std::string::npos);
    }
  });
}

}  // namespace
}  // namespace ddp::train::detail
