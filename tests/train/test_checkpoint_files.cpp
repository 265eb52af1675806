// The pickle rewrite for LibTorch's unpickler, save_atomic's failure modes, load_checkpoint's errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "checkpoint_test_util.h"
#include "ddp/dist/errors.h"
#include "ddp/train/checkpoint.h"
#include "test_files.h"
#include "tied_checkpoint.h"
#include "train/checkpoint/torch_format.h"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

// pickle.dumps(od, protocol=2) for od = OrderedDict([('a', 1), ('b', [2])]) with
// od._metadata = OrderedDict([('', {'version': 1})]): OrderedDict, BUILD, SETITEM, APPEND.
const std::string kOrderedDict(
    "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a\x71"
    "\x00\x29\x52\x71\x01\x28\x58\x01\x00\x00\x00\x61\x71\x02\x4b\x01\x58\x01\x00\x00\x00\x62\x71\x03\x5d\x71\x04\x4b"
    "\x02\x61\x75\x7d\x71\x05\x58\x09\x00\x00\x00\x5f\x6d\x65\x74\x61\x64\x61\x74\x61\x71\x06\x68\x00\x29\x52\x71\x07"
    "\x58\x00\x00\x00\x00\x71\x08\x7d\x71\x09\x58\x07\x00\x00\x00\x76\x65\x72\x73\x69\x6f\x6e\x71\x0a\x4b\x01\x73\x73"
    "\x73\x62\x2e",
    115);
// pickle.dumps({'x': 2**40, 'y': -2**40, 'z': 2**63-1, 'w': -1, 'v': [7]}, protocol=2): LONG1 of 6 and 8 bytes.
const std::string kInts(
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x78\x71\x01\x8a\x06\x00\x00\x00\x00\x00\x01\x58\x01\x00\x00\x00\x79"
    "\x71\x02\x8a\x06\x00\x00\x00\x00\x00\xff\x58\x01\x00\x00\x00\x7a\x71\x03\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"
    "\x58\x01\x00\x00\x00\x77\x71\x04\x4a\xff\xff\xff\xff\x58\x01\x00\x00\x00\x76\x71\x05\x5d\x71\x06\x4b\x07\x61\x75"
    "\x2e",
    85);
// pickle.dumps([OrderedDict([('k', OrderedDict())]), OrderedDict()], protocol=2): the class from the memo.
const std::string kNested(
    "\x80\x02\x5d\x71\x00\x28\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69"
    "\x63\x74\x0a\x71\x01\x29\x52\x71\x02\x58\x01\x00\x00\x00\x6b\x71\x03\x68\x01\x29\x52\x71\x04\x73\x68\x01\x29\x52"
    "\x71\x05\x65\x2e",
    60);

c10::IValue unpickle_rewritten(const std::string& pickle) {
  const std::string fixed = train::detail::rewrite_pickle_for_libtorch(pickle, "test");
  return torch::jit::unpickle(fixed.data(), fixed.size());
}

std::string rewrite_error(const std::string& pickle) {
  try {
    train::detail::rewrite_pickle_for_libtorch(pickle, "f.pt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no ddp::Error)";
}

TEST(PickleCompat, OrderedDictWithMetadataBecomesADictInOrder) {
  EXPECT_THROW(torch::jit::unpickle(kOrderedDict.data(), kOrderedDict.size()), c10::Error);  // LibTorch alone
  const c10::IValue v = unpickle_rewritten(kOrderedDict);
  ASSERT_TRUE(v.isGenericDict());
  const auto d = v.toGenericDict();
  ASSERT_EQ(d.size(), 2u);
  auto it = d.begin();
  EXPECT_EQ(it->key().toStringRef(), "a");
  EXPECT_EQ(it->value().toInt(), 1);
  ++it;
  EXPECT_EQ(it->key().toStringRef(), "b");
  ASSERT_TRUE(it->value().isList());
  ASSERT_EQ(it->value().toListRef().size(), 1u);
  EXPECT_EQ(it->value().toListRef()[0].toInt(), 2);
}

TEST(PickleCompat, WideIntegersAndOneItemListsLoad) {
  const auto d = unpickle_rewritten(kInts).toGenericDict();
  EXPECT_EQ(d.at(std::string("x")).toInt(), int64_t(1) << 40);
  EXPECT_EQ(d.at(std::string("y")).toInt(), -(int64_t(1) << 40));
  EXPECT_EQ(d.at(std::string("z")).toInt(), INT64_MAX);
  EXPECT_EQ(d.at(std::string("w")).toInt(), -1);
  EXPECT_EQ(d.at(std::string("v")).toListRef().at(0).toInt(), 7);
}

TEST(PickleCompat, NestedOrderedDictsFromTheMemo) {
  const c10::IValue v = unpickle_rewritten(kNested);
  ASSERT_TRUE(v.isList());
  const auto& l = v.toListRef();
  ASSERT_EQ(l.size(), 2u);
  const auto inner = l[0].toGenericDict();
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_TRUE(inner.at(std::string("k")).toGenericDict().empty());
  EXPECT_TRUE(l[1].toGenericDict().empty());
}

TEST(PickleCompat, ErrorsNameTheFileOffsetAndCause) {
  EXPECT_NE(rewrite_error(std::string("\x80\x04K\x01.", 5)).find("f.pt: pickle offset 1: pickle protocol 4"),
            std::string::npos);
  EXPECT_NE(rewrite_error(std::string("\x80\x02K\x01"
                                      "0K\x02.",
                                      8))
                .find("offset 4: opcode POP (0x30)"),
            std::string::npos);
  EXPECT_NE(rewrite_error(std::string("\x80\x02X\x05\x00\x00\x00"
                                      "ab",
                                      9))
                .find("offset 2: the pickle ends"),
            std::string::npos);
  EXPECT_NE(rewrite_error(std::string("\x80\x02\x8a\x09"
                                      "123456789.",
                                      14))
                .find("offset 2: integer of 9 bytes"),
            std::string::npos);
  EXPECT_NE(rewrite_error("\x80\x02"
                          "ccollections\nOrderedDict\n]\x85R.")
                .find("constructor arguments"),
            std::string::npos);
  EXPECT_NE(rewrite_error("not a pickle").find("f.pt: pickle offset 0: not a pickle"), std::string::npos);
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

c10::IValue small_checkpoint(double value) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("value", at::full({3}, value));
  return d;
}

double value_of(const std::string& path) {
  return train::load_checkpoint(path).toGenericDict().at(std::string("value")).toTensor()[0].item<double>();
}

TEST(SaveAtomic, WritesOnlyTheTargetFile) {
  TempDir dir;
  train::save_atomic(small_checkpoint(1.5), dir.file("c.pt"));
  train::save_atomic(small_checkpoint(2.5), dir.file("c.pt"));  // replaces
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"c.pt"});
  EXPECT_EQ(value_of(dir.file("c.pt")), 2.5);
}

// Tied tensors stay tied in the file (tied_checkpoint.h; on a GPU: test_cuda).
TEST(SaveAtomic, TiedTensorsStayTied) {
  TempDir dir;
  expect_ties_survive_a_file(at::Device(at::kCPU), dir.path());
}

TEST(SaveAtomic, UnwritableDirectoryFailsAndLeavesNothing) {
  TempDir dir;
  const std::string ro = dir.file("ro");
  fs::create_directory(ro);
  train::save_atomic(small_checkpoint(1.0), ro + "/c.pt");
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(ro.c_str(), 0555);
  std::string msg;
  {
    test::Unprivileged guard;
    std::ofstream probe(ro + "/probe");
    if (probe) GTEST_SKIP() << "cannot drop the privilege to write anywhere";
    try {
      train::save_atomic(small_checkpoint(2.0), ro + "/c.pt");
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  ::chmod(ro.c_str(), 0755);
  EXPECT_NE(msg.find("cannot write " + ro + "/c.pt: creating " + ro + "/c.pt.tmp."), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_EQ(listing(ro), std::vector<std::string>{"c.pt"});
  EXPECT_EQ(value_of(ro + "/c.pt"), 1.0);
}

TEST(SaveAtomic, FailedWriteRemovesTheTemporaryAndKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("c.pt");
  train::save_atomic(small_checkpoint(1.0), path);
  // A file size limit makes write() fail half way (EFBIG), like a full disk.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  c10::impl::GenericDict big(c10::StringType::get(), c10::AnyType::get());
  big.insert("value", at::full({256 * 1024}, 2.0));
  std::string msg;
  try {
    train::save_atomic(big, path);
  } catch (const Error& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("cannot write " + path + ": writing " + path + ".tmp."), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"c.pt"});
  EXPECT_EQ(value_of(path), 1.0);
}

TEST(SaveAtomic, UnpicklableObjectIsAnInvalidArgumentAndWritesNothing) {
  TempDir dir;
  const c10::IValue future(c10::make_intrusive<c10::ivalue::Future>(c10::AnyType::get()));
  EXPECT_THROW(train::save_atomic(future, dir.file("c.pt")), InvalidArgument);
  EXPECT_TRUE(listing(dir.path()).empty());
}

std::string load_error(const std::string& path) {
  try {
    train::load_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no ddp::Error)";
}

TEST(LoadCheckpoint, MissingEmptyGarbageAndTruncatedFilesNameThePath) {
  TempDir dir;
  EXPECT_NE(load_error(dir.file("none.pt")).find(dir.file("none.pt") + ": cannot read: No such file or directory"),
            std::string::npos);
  std::ofstream(dir.file("empty.pt")).close();
  EXPECT_NE(load_error(dir.file("empty.pt")).find(dir.file("empty.pt") + ": is empty"), std::string::npos);
  std::ofstream(dir.file("text.pt")) << "hello, not a checkpoint";
  EXPECT_NE(load_error(dir.file("text.pt")).find(dir.file("text.pt") + ": not a zip archive"), std::string::npos);

  train::save_atomic(small_checkpoint(1.0), dir.file("full.pt"));
  const auto size = fs::file_size(dir.file("full.pt"));
  for (auto keep : {size / 2, size - 10, uintmax_t(30)}) {
    fs::copy_file(dir.file("full.pt"), dir.file("cut.pt"), fs::copy_options::overwrite_existing);
    fs::resize_file(dir.file("cut.pt"), keep);
    const std::string msg = load_error(dir.file("cut.pt"));
    EXPECT_NE(msg.find(dir.file("cut.pt") + ": not a readable torch.save file (truncated or corrupt?)"),
              std::string::npos)
        << "kept " << keep << " of " << size << " bytes: " << msg;
  }
}

TEST(LoadCheckpoint, EveryFlippedBitIsCaughtOrHarmless) {
  // Each byte of a checkpoint with one bit flipped: loading must fail with a ddp::Error naming the file, or (a
  // byte no record covers: zip padding, unused header fields) load exactly the original contents.
  TempDir dir;
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("w", at::arange(16, at::kFloat) * 0.25 + 1234.5);
  d.insert("step", int64_t{42});
  train::save_atomic(d, dir.file("good.pt"));
  std::ifstream in(dir.file("good.pt"), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const at::Tensor w = d.at("w").toTensor();
  const std::string w_bytes(static_cast<const char*>(w.data_ptr()), w.nbytes());
  const size_t w_at = good.find(w_bytes);
  ASSERT_NE(w_at, std::string::npos) << "the tensor's bytes are stored as they are";
  int caught = 0, harmless = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= static_cast<char>(1 << (i % 8));
    const std::string path = dir.file("bad.pt");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    try {
      auto got = train::load_checkpoint(path).toGenericDict();
      ASSERT_TRUE(got.at("w").toTensor().equal(w) && got.at("step").toInt() == 42)
          << "byte " << i << " of " << good.size() << ": a flipped bit loaded different contents silently";
      ++harmless;
    } catch (const Error& e) {
      const std::string msg = e.what();
      ASSERT_NE(msg.find(path), std::string::npos) << msg;
      if (i >= w_at && i < w_at + w_bytes.size()) {  // inside the tensor's record: named, with the cause
        EXPECT_NE(msg.find("corrupt checkpoint: record '"), std::string::npos) << msg;
        EXPECT_NE(msg.find("/data/0' (64 bytes) fails its check: CRC error"), std::string::npos) << msg;
      }
      ++caught;
    }
  }
  EXPECT_GT(caught, int(good.size()) / 2) << harmless << " harmless";
}

}  // namespace
}  // namespace ddp::testing
