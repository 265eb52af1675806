// CheckpointManager: naming, keep_last, latest(), and rank 0 writing for ranks as threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "ddp/dist/errors.h"
#include "ddp/train/checkpoint.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

c10::IValue contents(int64_t epoch, int64_t step) {
  train::CheckpointContents c;
  c.model = {{"w", at::full({2}, static_cast<double>(epoch))}};
  c.epoch = epoch;
  c.step = step;
  return train::to_ivalue(c);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CheckpointManager, KeepsTheLastTwoAndLatestNamesTheNewest) {
  TempDir dir;
  train::CheckpointManager mgr({dir.file("run/ckpt"), /*keep_last=*/2});  // created on the first save
  EXPECT_FALSE(mgr.latest().has_value());
  std::string last;
  for (int64_t e = 0; e < 4; ++e) last = mgr.save(e, e * 250, [&] { return contents(e, e * 250); });
  EXPECT_EQ(last, dir.file("run/ckpt/checkpoint-e0003-s00000750.pt"));
  EXPECT_EQ(listing(dir.file("run/ckpt")),
            (std::vector<std::string>{"checkpoint-e0002-s00000500.pt", "checkpoint-e0003-s00000750.pt", "latest"}));
  EXPECT_EQ(read_text(dir.file("run/ckpt/latest")), "checkpoint-e0003-s00000750.pt\n");
  ASSERT_TRUE(mgr.latest().has_value());
  EXPECT_EQ(*mgr.latest(), last);
  const auto c = train::checkpoint_from_ivalue(train::load_checkpoint(*mgr.latest()), last);
  EXPECT_EQ(c.epoch, 3);
  EXPECT_EQ(c.step, 750);
  EXPECT_EQ(c.model[0].second[0].item<double>(), 3.0);
}

TEST(CheckpointManager, LatestFallsBackToTheHighestNumberedFile) {
  TempDir dir;
  train::CheckpointManager mgr({dir.path(), /*keep_last=*/0});  // keep all
  mgr.save(1, 10, [] { return contents(1, 10); });
  mgr.save(10, 5, [] { return contents(10, 5); });
  mgr.save(2, 99, [] { return contents(2, 99); });  // saved last, so "latest" names it
  EXPECT_EQ(*mgr.latest(), dir.file("checkpoint-e0002-s00000099.pt"));
  fs::remove(dir.file("checkpoint-e0002-s00000099.pt"));  // latest names a missing file
  EXPECT_EQ(*mgr.latest(), dir.file("checkpoint-e0010-s00000005.pt"));
  fs::remove(dir.file("latest"));
  std::ofstream(dir.file("checkpoint-e0011-s00000000.pt.tmp.123")) << "partial";  // not complete: ignored
  std::ofstream(dir.file("checkpoint-e0012-s00000000.pt")).close();               // empty: ignored
  EXPECT_EQ(*mgr.latest(), dir.file("checkpoint-e0010-s00000005.pt"));
}

TEST(CheckpointManager, CandidatesAreNewestFirstStartingWithLatest) {
  TempDir dir;
  train::CheckpointManager mgr({dir.path(), /*keep_last=*/0});
  EXPECT_TRUE(mgr.candidates().empty());
  for (int64_t e : {1, 3, 2}) mgr.save(e, e * 10, [&] { return contents(e, e * 10); });
  const auto f = [&](int64_t e) {
    return dir.file("checkpoint-e000" + std::to_string(e) + "-s000000" + std::to_string(e * 10) + ".pt");
  };
  EXPECT_EQ(mgr.candidates(), (std::vector<std::string>{f(2), f(3), f(1)}));  // latest (saved last), then by number
  fs::remove(dir.file("latest"));
  EXPECT_EQ(mgr.candidates(), (std::vector<std::string>{f(3), f(2), f(1)}));
}

TEST(CheckpointManager, RemovesTemporariesOfDeadWritersOnly) {
  TempDir dir;
  train::CheckpointManager mgr({dir.path(), 3});
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);  // reaped: no process has this pid now
  const std::string gone1 = "checkpoint-e0001-s00000010.pt.tmp." + std::to_string(dead);
  const std::string gone2 = "latest.tmp." + std::to_string(dead);
  const std::string live = "checkpoint-e0002-s00000020.pt.tmp." + std::to_string(::getpid());
  for (const auto& name : {gone1, gone2, live, std::string("notes.tmp.txt")})
    std::ofstream(dir.file(name)) << "partial";
  EXPECT_EQ(mgr.remove_stale_temporaries(), (std::vector<std::string>{gone1, gone2}));
  EXPECT_EQ(listing(dir.path()), (std::vector<std::string>{live, "notes.tmp.txt"}));
}

TEST(CheckpointManager, RejectsBadArguments) {
  EXPECT_THROW(train::CheckpointManager({"", 3}), InvalidArgument);
  EXPECT_THROW(train::CheckpointManager({"x", -1}), InvalidArgument);
  TempDir dir;
  train::CheckpointManager mgr({dir.path()});
  EXPECT_THROW(mgr.save(-1, 0, [] { return contents(0, 0); }), InvalidArgument);
  EXPECT_THROW(mgr.save(0, 0, nullptr), InvalidArgument);
}

// One save per rank thread; only rank 0 calls make and writes; every rank gets the same path.
void ranks_save(const std::string& backend, int world) {
  TempDir dir;
  std::mutex mu;
  std::vector<std::vector<std::string>> paths(static_cast<size_t>(world));
  std::vector<int> makes(static_cast<size_t>(world), 0);
  run_ranks(backend, world, [&](ProcessGroup& pg) {
    const GroupPtr group(GroupPtr(), &pg);  // non-owning
    train::CheckpointManager mgr({dir.path(), /*keep_last=*/2, group});
    for (int64_t e = 0; e < 4; ++e) {
      const std::string p = mgr.save(e, 100 + e, [&] {
        std::lock_guard<std::mutex> lock(mu);
        ++makes[static_cast<size_t>(pg.rank())];
        return contents(e, 100 + e);
      });
      // After save returns on any rank, the file is there.
      EXPECT_TRUE(fs::exists(p)) << "rank " << pg.rank();
      std::lock_guard<std::mutex> lock(mu);
      paths[static_cast<size_t>(pg.rank())].push_back(p);
    }
    EXPECT_EQ(*mgr.latest(), dir.file("checkpoint-e0003-s00000103.pt"));
    // A failure on rank 0 reaches every rank.
    std::string msg;
    try {
      mgr.save(9, 9, []() -> c10::IValue { throw Error("disk on fire"); });
    } catch (const Error& e) {
      msg = e.what();
    }
    if (pg.rank() == 0)
      EXPECT_EQ(msg, "disk on fire");
    else
      EXPECT_NE(msg.find("rank 0 failed to save " + dir.file("checkpoint-e0009-s00000009.pt")), std::string::npos)
          << msg;
  });
  EXPECT_EQ(makes[0], 4);
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(makes[static_cast<size_t>(r)], 0) << "rank " << r;
    EXPECT_EQ(paths[static_cast<size_t>(r)], paths[0]) << "rank " << r;
  }
  EXPECT_EQ(listing(dir.path()),
            (std::vector<std::string>{"checkpoint-e0002-s00000102.pt", "checkpoint-e0003-s00000103.pt", "latest"}));
}

// save_async: what is written is the state at the call, whatever happens to the tensors afterwards.
TEST(CheckpointManager, SaveAsyncWritesTheStateAtTheCall) {
  TempDir dir;
  train::CheckpointManager mgr({dir.file("ckpt"), /*keep_last=*/2});
  at::Tensor w = at::full({3}, 1.0);
  EXPECT_FALSE(mgr.wait().has_value());  // nothing in flight
  const std::string p = mgr.save_async(0, 5, [&] {
    train::CheckpointContents c;
    c.model = {{"w", w}};
    c.step = 5;
    return train::to_ivalue(c);
  });
  w.fill_(2.0);  // the next step, while the write may still run
  EXPECT_EQ(mgr.wait(), std::optional<std::string>(p));
  EXPECT_FALSE(mgr.failed());
  EXPECT_EQ(*mgr.latest(), p);
  const auto c = train::checkpoint_from_ivalue(train::load_checkpoint(p), p);
  EXPECT_TRUE(c.model[0].second.equal(at::full({3}, 1.0)));
  EXPECT_EQ(c.step, 5);
  // Saves in turn: each waits for the one before; keep_last prunes as save does.
  for (int64_t e = 1; e <= 3; ++e) mgr.save_async(e, 5 + e, [&] { return contents(e, 5 + e); });
  mgr.save(4, 9, [] { return contents(4, 9); });  // a blocking save waits for the one in flight
  EXPECT_EQ(listing(dir.file("ckpt")),
            (std::vector<std::string>{"checkpoint-e0003-s00000008.pt", "checkpoint-e0004-s00000009.pt", "latest"}));
}

// A manager destroyed with a save in flight finishes writing it.
TEST(CheckpointManager, DestructionFinishesTheSaveInFlight) {
  TempDir dir;
  std::string p;
  {
    train::CheckpointManager mgr({dir.path()});
    p = mgr.save_async(2, 7, [] { return contents(2, 7); });
  }
  EXPECT_EQ(train::checkpoint_from_ivalue(train::load_checkpoint(p), p).epoch, 2);
  EXPECT_EQ(read_text(dir.file("latest")), "checkpoint-e0002-s00000007.pt\n");
}

// A snapshot holds host copies: values, dtypes, offsets and strides kept; views of one storage share one copy.
TEST(CheckpointManager, HostSnapshotCopiesEachStorageOnce) {
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor row = base[1], col = base.select(1, 2), t = base.t();
  auto d = train::plain_dict();
  auto inner = train::plain_dict();
  inner.insert("t", t);
  inner.insert("n", int64_t(3));
  d.insert("base", base);
  d.insert("row", row);
  d.insert("inner", inner);
  d.insert("list", c10::List<at::Tensor>({col, at::ones({2}, at::kBFloat16)}));
  d.insert("tuple", c10::ivalue::Tuple::create({c10::IValue(base), c10::IValue("x")}));
  const auto snap = train::host_snapshot(d).toGenericDict();
  const at::Tensor s_base = snap.at("base").toTensor(), s_row = snap.at("row").toTensor();
  const at::Tensor s_t = snap.at("inner").toGenericDict().at("t").toTensor();
  const auto s_list = snap.at("list").toTensorList().vec();
  EXPECT_TRUE(s_base.equal(base));
  EXPECT_NE(s_base.data_ptr(), base.data_ptr());  // a copy
  base.add_(100);                                 // not seen by the snapshot
  EXPECT_TRUE(s_base.equal(at::arange(12, at::kFloat).reshape({3, 4})));
  // One copy of the storage: the views keep their offsets and strides into it.
  EXPECT_EQ(s_row.storage().unsafeGetStorageImpl(), s_base.storage().unsafeGetStorageImpl());
  EXPECT_EQ(s_row.storage_offset(), 4);
  EXPECT_EQ(s_t.strides(), t.strides());
  EXPECT_EQ(s_t.storage().unsafeGetStorageImpl(), s_base.storage().unsafeGetStorageImpl());
  EXPECT_EQ(s_list[0].storage_offset(), 2);
  EXPECT_EQ(s_list[0].strides(), col.strides());
  EXPECT_EQ(s_list[1].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(s_list[1].equal(at::ones({2}, at::kBFloat16)));
  const auto tuple = snap.at("tuple").toTupleRef().elements();
  EXPECT_EQ(tuple[0].toTensor().storage().unsafeGetStorageImpl(), s_base.storage().unsafeGetStorageImpl());
  EXPECT_EQ(tuple[1].toStringRef(), "x");
  EXPECT_EQ(snap.at("inner").toGenericDict().at("n").toInt(), 3);
  // A lazily conjugated view keeps its values (the flag is resolved, not dropped), and requires_grad.
  const at::Tensor z = at::complex(at::arange(3, at::kFloat), at::ones({3})).requires_grad_();
  auto lazy = train::plain_dict();
  lazy.insert("conj", z.conj());
  lazy.insert("neg", at::imag(z.conj()));  // a negated view
  const auto got = train::host_snapshot(lazy).toGenericDict();
  EXPECT_TRUE(got.at("conj").toTensor().equal(z.conj().resolve_conj()));
  EXPECT_TRUE(got.at("conj").toTensor().requires_grad());
  EXPECT_TRUE(got.at("neg").toTensor().equal(-at::ones({3})));
  // A tensor that the host must not read (meta: no memory at all) is refused by the copy, not read.
  auto bad = train::plain_dict();
  bad.insert("w", at::empty({2}, at::TensorOptions().device(at::kMeta)));
  EXPECT_THROW(train::host_snapshot(bad), c10::Error);
}

// save_async on rank threads: rank 0 alone makes and writes, every rank waits alike; failures of make and of the
// write itself reach every rank at wait().
void ranks_save_async(const std::string& backend, int world) {
  TempDir dir;
  std::mutex mu;
  std::vector<int> makes(static_cast<size_t>(world), 0);
  run_ranks(backend, world, [&](ProcessGroup& pg) {
    const GroupPtr group(GroupPtr(), &pg);  // non-owning
    train::CheckpointManager mgr({dir.file("ok"), /*keep_last=*/2, group});
    std::string p;
    for (int64_t e = 0; e < 3; ++e)
      p = mgr.save_async(e, e, [&] {
        std::lock_guard<std::mutex> lock(mu);
        ++makes[static_cast<size_t>(pg.rank())];
        return contents(e, e);
      });
    EXPECT_EQ(mgr.wait(), std::optional<std::string>(p));
    EXPECT_TRUE(fs::exists(p));
    const auto expect_failure = [&](train::CheckpointManager& m, const std::string& file, const std::string& own) {
      std::string msg;
      try {
        m.wait();
      } catch (const Error& e) {
        msg = e.what();
      }
      if (pg.rank() == 0)
        EXPECT_NE(msg.find(own), std::string::npos) << msg;
      else
        EXPECT_NE(msg.find("rank 0 failed to save " + file), std::string::npos) << msg;
    };
    // make() throws: save_async returns, rank 0 knows at once, every rank at wait().
    mgr.save_async(9, 9, []() -> c10::IValue { throw Error("disk on fire"); });
    EXPECT_EQ(mgr.failed(), pg.rank() == 0);
    expect_failure(mgr, dir.file("ok/checkpoint-e0009-s00000009.pt"), "disk on fire");
    // The write fails on the background thread: the directory is a file.
    std::ofstream(dir.file("a-file")).close();
    train::CheckpointManager blocked({dir.file("a-file/ckpt"), 2, group});
    blocked.save_async(1, 1, [] { return contents(1, 1); });
    expect_failure(blocked, dir.file("a-file/ckpt/checkpoint-e0001-s00000001.pt"), "cannot create the directory");
    EXPECT_FALSE(blocked.wait().has_value());  // reported once
  });
  EXPECT_EQ(makes[0], 3);
  for (int r = 1; r < world; ++r) EXPECT_EQ(makes[static_cast<size_t>(r)], 0) << "rank " << r;
  EXPECT_EQ(listing(dir.file("ok")),
            (std::vector<std::string>{"checkpoint-e0001-s00000001.pt", "checkpoint-e0002-s00000002.pt", "latest"}));
}

TEST(CheckpointManager, SaveAsyncOnThreadRanksGloo) {
  if (!is_backend_available("gloo")) GTEST_SKIP() << "gloo backend not built";
  for (int world : {2, 4}) ranks_save_async("gloo", world);
}

TEST(CheckpointManager, SaveAsyncWorldOfOneLocal) { ranks_save_async("local", 1); }

TEST(CheckpointManager, RankZeroWritesOnThreadRanksGloo) {
  if (!is_backend_available("gloo")) GTEST_SKIP() << "gloo backend not built";
  ranks_save("gloo", 3);
}

TEST(CheckpointManager, WorldOfOneLocal) { ranks_save("local", 1); }

}  // namespace
}  // namespace ddp::testing
