// Per-rank shard files: layout, staleness, corruption, and prepare_shards on
// ranks as threads (local and gloo backends).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "data/data_test_util.h"
#include "ddp/data/shards.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

using data::DataError;

// Row i of x holds i * 100 + (0, 1, 2, ...); y[i] = 1000 + i: every row is recognisable.
std::pair<at::Tensor, at::Tensor> source(int64_t n) {
  at::Tensor x = (at::arange(n, at::kFloat).view({n, 1, 1}) * 100 + at::arange(6, at::kFloat).view({1, 2, 3}));
  return {x, at::arange(n, at::kLong) + 1000};
}

data::ShardSpec spec_in(const TempDir& dir, int64_t w, uint64_t seed = 5) {
  data::ShardSpec s;
  s.dir = dir.path() + "/shards";
  s.name = "toy";
  s.num_shards = w;
  s.seed = seed;
  return s;
}

// Each shard's rows equal the source rows its index names; shards are disjoint.
void expect_shards(const std::vector<data::Shard>& shards, const at::Tensor& x, const at::Tensor& y, int64_t per) {
  std::set<int64_t> seen;
  for (size_t r = 0; r < shards.size(); ++r) {
    const auto& s = shards[r];
    ASSERT_EQ(s.x.size(0), per) << "shard " << r;
    ASSERT_EQ(s.y.size(0), per);
    ASSERT_EQ(s.index.size(0), per);
    EXPECT_TRUE(at::equal(s.x, x.index_select(0, s.index))) << "shard " << r;
    EXPECT_TRUE(at::equal(s.y, y.index_select(0, s.index))) << "shard " << r;
    for (int64_t k = 0; k < per; ++k) seen.insert(s.index[k].item<int64_t>());
  }
  EXPECT_EQ(seen.size(), shards.size() * per) << "shards overlap";
}

TEST(Shards, TenSamplesThreeShards) {
  TempDir dir;
  auto [x, y] = source(10);
  auto spec = spec_in(dir, 3);
  data::write_shards(spec, x, y);
  std::vector<data::Shard> shards;
  for (int64_t r = 0; r < 3; ++r) shards.push_back(data::load_shard(spec, r));
  expect_shards(shards, x, y, 3);  // 9 distinct samples; the 10 % 3 = 1 left over is dropped
  // Shard r holds perm[r], perm[r + 3], perm[r + 6] of the seeded permutation.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(spec.seed);
  at::Tensor perm = at::randperm(10, gen, at::kLong);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(shards[r].index[k].item<int64_t>(), perm[r + 3 * k].item<int64_t>());
  EXPECT_TRUE(std::filesystem::exists(data::manifest_path(spec)));
  EXPECT_EQ(data::shard_path(spec, 2), spec.dir + "/toy.shard-2-of-3.bin");
}

TEST(Shards, Uint8ImagesAndWorldChange) {
  TempDir dir;
  at::Tensor x = (at::arange(12 * 16, at::kLong) % 251).to(at::kByte).view({12, 1, 4, 4});
  at::Tensor y = at::arange(12, at::kLong) % 10;
  auto spec = spec_in(dir, 4);
  data::write_shards(spec, x, y);
  std::vector<data::Shard> shards;
  for (int64_t r = 0; r < 4; ++r) shards.push_back(data::load_shard(spec, r));
  ASSERT_EQ(shards[0].x.scalar_type(), at::kByte);
  expect_shards(shards, x, y, 3);
  // Rewriting for 5 ranks removes the files of the 4-rank layout, and only those.
  auto other = spec;
  other.name = "toy.shard-x";
  other.num_shards = 2;
  data::write_shards(other, x, y);
  spec.num_shards = 5;
  data::write_shards(spec, x, y);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/shards/toy.shard-3-of-4.bin"));
  EXPECT_EQ(data::load_shard(other, 1).x.size(0), 6);
  EXPECT_TRUE(std::filesystem::exists(data::shard_path(spec, 4)));
  EXPECT_EQ(data::load_shard(spec, 4).x.size(0), 2);
}

TEST(Shards, UpToDate) {
  TempDir dir;
  auto [x, y] = source(10);
  auto spec = spec_in(dir, 3);
  spec.source_id = "toy v1";
  EXPECT_FALSE(data::shards_up_to_date(spec, x, y));  // nothing written yet
  data::write_shards(spec, x, y);
  EXPECT_TRUE(data::shards_up_to_date(spec, x, y));
  auto changed = [&](auto edit) {
    auto s = spec;
    edit(s);
    return !data::shards_up_to_date(s, x, y);
  };
  EXPECT_TRUE(changed([](data::ShardSpec& s) { s.seed = 6; }));
  EXPECT_TRUE(changed([](data::ShardSpec& s) { s.num_shards = 2; }));
  EXPECT_TRUE(changed([](data::ShardSpec& s) { s.name = "other"; }));
  EXPECT_TRUE(changed([](data::ShardSpec& s) { s.source_id = "toy v2"; }));
  at::Tensor x2 = x.clone();
  x2[7][1][2] = -1;
  EXPECT_FALSE(data::shards_up_to_date(spec, x2, y));
  at::Tensor y2 = y.clone();
  y2[0] = 5;
  EXPECT_FALSE(data::shards_up_to_date(spec, x, y2));
  auto [x11, y11] = source(11);
  EXPECT_FALSE(data::shards_up_to_date(spec, x11, y11));
  std::filesystem::remove(data::shard_path(spec, 1));
  EXPECT_FALSE(data::shards_up_to_date(spec, x, y));
}

TEST(Shards, CorruptMissingAndMixedFiles) {
  TempDir dir;
  auto [x, y] = source(10);
  auto spec = spec_in(dir, 3);
  data::write_shards(spec, x, y);
  const std::string p1 = data::shard_path(spec, 1);
  const std::string good = read_bytes(p1);
  std::string flipped = good;
  flipped[flipped.size() - 20] ^= 0x01;  // one bit of the index data
  write_bytes(p1, flipped);
  expect_error<DataError>([&] { data::load_shard(spec, 1); }, {p1, "checksum mismatch", "corrupt"});
  try {  // a CRC cannot locate the flipped byte: the message must not pretend to (it once named the checksum's own)
    data::load_shard(spec, 1);
    ADD_FAILURE() << "a flipped bit loaded";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).find("at byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes 0.." + std::to_string(good.size() - 5)), std::string::npos) << e.what();
  }
  write_bytes(p1, good.substr(0, good.size() - 9));
  expect_error<DataError>([&] { data::load_shard(spec, 1); },
                          {p1, "truncated at byte " + std::to_string(good.size() - 9)});
  write_bytes(p1, "not a shard file at all, just text");
  expect_error<DataError>([&] { data::load_shard(spec, 1); }, {p1, "not a ddp shard file"});
  std::filesystem::remove(p1);
  expect_error<DataError>([&] { data::load_shard(spec, 1); }, {p1, "cannot open"});
  // A shard of another write (another seed) next to this write's manifest.
  TempDir other;
  auto spec2 = spec_in(other, 3, 99);
  data::write_shards(spec2, x, y);
  std::filesystem::copy_file(data::shard_path(spec2, 1), p1);
  expect_error<DataError>([&] { data::load_shard(spec, 1); }, {p1, "files of different writes are mixed"});
  // Loading with another spec than the one written.
  auto s = spec;
  s.seed = 6;
  expect_error<DataError>([&] { data::load_shard(s, 0); }, {"toy.manifest", "written with seed 5, not 6"});
  s = spec;
  s.name = "nothing";
  expect_error<DataError>([&] { data::load_shard(s, 0); }, {"nothing.manifest: missing"});
  std::string manifest = read_bytes(data::manifest_path(spec));
  write_bytes(data::manifest_path(spec), manifest.substr(0, manifest.find("samples=")));
  expect_error<DataError>([&] { data::load_shard(spec, 0); }, {"toy.manifest", "missing key 'samples'"});
}

TEST(Shards, BadArguments) {
  TempDir dir;
  auto [x, y] = source(2);
  auto spec = spec_in(dir, 3);
  expect_error<ddp::InvalidArgument>([&] { data::write_shards(spec, x, y); }, {"2 samples cannot fill 3 shards"});
  spec.num_shards = 2;
  expect_error<ddp::InvalidArgument>([&] { data::write_shards(spec, x, y.to(at::kInt)); }, {"y must be int64 [N]"});
  expect_error<ddp::InvalidArgument>([&] { data::write_shards(spec, x, y.narrow(0, 0, 1)); }, {"y must be int64 [N]"});
  expect_error<ddp::InvalidArgument>([&] { data::load_shard(spec, 2); }, {"rank 2 is outside [0, 2)"});
  spec.num_shards = 0;
  expect_error<ddp::InvalidArgument>([&] { data::load_shard(spec, 0); }, {"num_shards must be >= 1"});
  spec.num_shards = 1;
  spec.name = "a/b";
  expect_error<ddp::InvalidArgument>([&] { data::write_shards(spec, x, y); }, {"ShardSpec.name 'a/b'"});
}

// Sets the file's modification time a year back and returns it: a rewrite (a new file) changes it.
std::filesystem::file_time_type age(const std::string& path) {
  auto t = std::filesystem::last_write_time(path) - std::chrono::hours(24 * 365);
  std::filesystem::last_write_time(path, t);
  return t;
}

// prepare_shards on `world` ranks as threads: returns each rank's shard; counts make_source calls.
std::vector<data::Shard> prepare(const std::string& backend, int world, const data::ShardSpec& base,
                                 std::atomic<int>& calls, int64_t n = 10) {
  std::vector<data::Shard> out(world);
  std::mutex mu;
  run_ranks(backend, world, [&](ProcessGroup& g) {
    auto spec = base;
    spec.num_shards = g.size();
    data::Shard s = data::prepare_shards(g, spec, [&, rank = g.rank()] {
      EXPECT_EQ(rank, 0) << "make_source called on rank " << rank;
      ++calls;
      return source(n);
    });
    std::lock_guard<std::mutex> lock(mu);
    out[g.rank()] = s;
  });
  return out;
}

void prepare_shards_case(const std::string& backend, int world) {
  TempDir dir;
  auto spec = spec_in(dir, world);
  spec.source_id = "toy n=10";
  auto [x, y] = source(10);
  std::atomic<int> calls{0};
  expect_shards(prepare(backend, world, spec, calls), x, y, 10 / world);
  EXPECT_EQ(calls, 1);
  spec.num_shards = world;
  const auto written = age(data::manifest_path(spec));
  expect_shards(prepare(backend, world, spec, calls), x, y, 10 / world);  // current: no source, no write
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(std::filesystem::last_write_time(data::manifest_path(spec)), written);
  spec.source_id = "toy n=12";
  auto [x12, y12] = source(12);
  expect_shards(prepare(backend, world, spec, calls, 12), x12, y12, 12 / world);  // stale: rewritten
  EXPECT_EQ(calls, 2);
  EXPECT_NE(std::filesystem::last_write_time(data::manifest_path(spec)), written);
  // Without a source_id the source is built every time, but written only when it changed.
  spec.source_id = "";
  prepare(backend, world, spec, calls, 12);
  EXPECT_EQ(calls, 3);
  const auto rewritten = age(data::manifest_path(spec));
  prepare(backend, world, spec, calls, 12);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(std::filesystem::last_write_time(data::manifest_path(spec)), rewritten);
}

TEST(Shards, PrepareShardsLocalWorld1) { prepare_shards_case("local", 1); }

TEST(Shards, PrepareShardsGlooWorld1) {
  if (!is_backend_available("gloo")) GTEST_SKIP() << "built without gloo";
  prepare_shards_case("gloo", 1);
}

TEST(Shards, PrepareShardsGlooWorld3) {
  if (!is_backend_available("gloo")) GTEST_SKIP() << "built without gloo";
  prepare_shards_case("gloo", 3);
}

// A failure on rank 0 reaches every rank instead of leaving them at the barrier.
TEST(Shards, PrepareShardsFailureOnRankZero) {
  if (!is_backend_available("gloo")) GTEST_SKIP() << "built without gloo";
  TempDir dir;
  auto spec = spec_in(dir, 3);
  spec.source_id = "broken";
  std::atomic<int> threw{0};
  run_ranks("gloo", 3, [&](ProcessGroup& g) {
    try {
      data::prepare_shards(
          g, spec, []() -> std::pair<at::Tensor, at::Tensor> { throw DataError("/data/x.gz: truncated at byte 7"); });
      ADD_FAILURE() << "rank " << g.rank() << " did not throw";
    } catch (const DataError& e) {
      EXPECT_EQ(g.rank(), 0);
      EXPECT_STREQ(e.what(), "/data/x.gz: truncated at byte 7");
      ++threw;
    } catch (const ddp::Error& e) {
      EXPECT_NE(g.rank(), 0);
      EXPECT_STREQ(e.what(), "prepare_shards: rank 0 could not write the shards: /data/x.gz: truncated at byte 7");
      const auto* peer = dynamic_cast<const ddp::PeerFailure*>(&e);  // the summary names rank 0, not this rank
      ASSERT_NE(peer, nullptr);
      EXPECT_EQ(peer->failed_rank(), 0);
      ++threw;
    }
  });
  EXPECT_EQ(threw, 3);
  run_ranks("local", 1, [&](ProcessGroup& g) {
    expect_error<ddp::InvalidArgument>([&] { data::prepare_shards(g, spec, [] { return source(10); }); },
                                       {"ShardSpec.num_shards (3) must equal the group size (1)"});
  });
}

}  // namespace
}  // namespace ddp::testing
