// TensorBoard event files: CRC32C vectors, exact record bytes, the file read
// back by the test's own decoder and by Python's protobuf library, flushing
// rules, and I/O errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>
#include <sstream>
#include <thread>

#include "ddp/dist/errors.h"
#include "ddp/train/tensorboard.h"
#include "train/event_reader.h"
#include "train/logging/event_format.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

using test::read_events;
using test::read_file;
using test::TempDir;

std::string bytes_of(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "(no ddp::Error thrown)";
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(detail::crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xFF');
  EXPECT_EQ(detail::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(detail::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(detail::crc32c("", 0), 0u);
  // Incremental: crc of "12345" continued with "6789".
  EXPECT_EQ(detail::crc32c("6789", 4, detail::crc32c("12345", 5)), 0xE3069283u);
  // The test decoder's bitwise CRC agrees with the table one.
  std::string text = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(test::bitwise_crc32c(text), detail::crc32c(text.data(), text.size()));
  EXPECT_EQ(detail::mask_crc(0), 0xa282ead8u);
  EXPECT_EQ(detail::mask_crc(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

TEST(EventFormat, ExactBytes) {
  detail::ProtoEncoder e;
  e.varint(300);
  EXPECT_EQ(e.bytes(), bytes_of({0xAC, 0x02}));
  detail::ProtoEncoder neg;
  neg.int64_field(2, -1);  // key 0x10, then 10 bytes
  EXPECT_EQ(neg.bytes(), bytes_of({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));

  // Event{wall_time 1.0, step 5, summary{value{tag "a", simple_value 0.5}}}
  EXPECT_EQ(detail::scalar_event(1.0, 5, "a", 0.5f),
            bytes_of({0x09, 0,    0,    0,    0,   0,    0, 0xF0, 0x3F, 0x10, 0x05, 0x2A, 0x0A,  //
                      0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0, 0,    0,    0x3F}));
  EXPECT_EQ(detail::version_event(2.0, "brain.Event:2"),
            bytes_of({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x1A, 13}) + "brain.Event:2");
  // Record framing around 3 bytes of data.
  std::string rec = detail::tfrecord("abc");
  ASSERT_EQ(rec.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(rec.substr(0, 8), bytes_of({3, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(test::read_le(rec, 8, 4), test::masked(test::bitwise_crc32c(rec.substr(0, 8))));
  EXPECT_EQ(rec.substr(12, 3), "abc");
  EXPECT_EQ(test::read_le(rec, 15, 4), test::masked(test::bitwise_crc32c("abc")));
}

TEST(SummaryWriter, NamesTheFileLikePyTorchAndStartsWithTheVersion) {
  TempDir tmp;
  double before = static_cast<double>(std::time(nullptr));
  SummaryWriter w(tmp / "runs/exp1/");  // trailing slash, missing parents
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::regex name(std::regex_replace(tmp.path(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                  R"(/runs/exp1/events\.out\.tfevents\.\d{10}\.)" + host + "\\." + std::to_string(::getpid()) +
                  R"(\.\d+)");
  EXPECT_TRUE(std::regex_match(w.path(), name)) << w.path();
  // Readable at once: the version record is already on disk.
  auto events = read_events(read_file(w.path()));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_FALSE(events[0].has_summary);
  EXPECT_GE(events[0].wall_time, before);
  EXPECT_LE(events[0].wall_time, before + 60);

  SummaryWriter second(tmp / "runs/exp1");
  EXPECT_NE(second.path(), w.path());
}

TEST(SummaryWriter, ScalarsReadBackExactly) {
  TempDir tmp;
  std::string path;
  {
    SummaryWriter w(tmp.path());
    path = w.path();
    w.add_scalar("train/loss", 0.4213, 1, 1700000000.25);
    w.add_scalar("train/loss", 0.25, 2, 1700000001.5);
    w.add_scalar("lr", 1e-3, 0, 1700000002.0);
    w.add_scalar("neg step", -2.5, -7, 1700000003.0);
    w.add_scalar("big step", 7.0, std::numeric_limits<int64_t>::max(), 1700000004.0);
    auto unix_now = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    const double t0 = unix_now();
    w.add_scalar("now", 1.0, 9);
    const double t1 = unix_now();
    w.close();
    w.close();  // idempotent
    EXPECT_NE(error_of([&] { w.add_scalar("late", 1, 1); }).find("is closed"), std::string::npos);
    auto events = read_events(read_file(path));
    ASSERT_EQ(events.size(), 7u);
    EXPECT_GE(events[6].wall_time, t0);  // "now" lies between the clock readings around the call
    EXPECT_LE(events[6].wall_time, t1);
  }
  auto events = read_events(read_file(path));
  ASSERT_EQ(events.size(), 7u);
  struct Want {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };
  std::vector<Want> want = {{"train/loss", 0.4213f, 1, 1700000000.25},
                            {"train/loss", 0.25f, 2, 1700000001.5},
                            {"lr", 1e-3f, 0, 1700000002.0},
                            {"neg step", -2.5f, -7, 1700000003.0},
                            {"big step", 7.0f, std::numeric_limits<int64_t>::max(), 1700000004.0}};
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& ev = events[i + 1];
    SCOPED_TRACE(want[i].tag);
    ASSERT_TRUE(ev.has_summary);
    ASSERT_EQ(ev.values.size(), 1u);
    EXPECT_EQ(ev.values[0].first, want[i].tag);
    EXPECT_EQ(ev.values[0].second, want[i].value);
    EXPECT_EQ(ev.step, want[i].step);
    EXPECT_EQ(ev.wall_time, want[i].wall_time);
  }
  EXPECT_EQ(events[6].values[0].first, "now");
  EXPECT_EQ(events[6].step, 9);
}

TEST(SummaryWriter, PythonProtobufReadsTheSameFile) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  w.add_scalar("train/loss", 0.4213, 1, 1700000000.25);
  w.add_scalar("lr", 1e-3, 0, 1700000002.0);   // step 0 is left out of the encoding
  w.add_scalar("zero", 0.0, 3, 1700000003.0);  // so is a value of +0.0
  w.add_scalar("minus zero", -0.0, 4, 1700000004.0);
  w.add_scalar("neg step", -2.5, -7, 1700000005.0);
  w.add_scalar("\xCE\xB5/unicode", 3.0, 5, 1700000006.0);
  w.add_scalar("inf", std::numeric_limits<double>::infinity(), 6, 1700000007.0);
  w.add_scalar("nan", nan, 7, 1700000008.0);
  w.add_scalar("rounded", 1.0 / 3.0, 8, 1700000009.0);
  w.flush();
  std::string out;
  int rc = test::run_command(std::string(DDP_PYTHON " ") + TB_ORACLE + " '" + w.path() + "'", out);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream lines(out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_TRUE(std::regex_match(line, std::regex(R"(V 1\d{9}(\.\d+)? brain\.Event:2)"))) << line;
  std::vector<std::string> want = {"S 1 0.421299994 1700000000.25 train/loss",
                                   "S 0 0.00100000005 1700000002 lr",
                                   "S 3 0 1700000003 zero",
                                   "S 4 -0 1700000004 minus zero",
                                   "S -7 -2.5 1700000005 neg step",
                                   "S 5 3 1700000006 \xCE\xB5/unicode",
                                   "S 6 inf 1700000007 inf",
                                   "S 7 nan 1700000008 nan",
                                   "S 8 0.333333343 1700000009 rounded"};
  for (const auto& w_line : want) {
    ASSERT_TRUE(std::getline(lines, line)) << "missing: " << w_line;
    EXPECT_EQ(line, w_line);
  }
  EXPECT_FALSE(std::getline(lines, line)) << "extra: " << line;
}

TEST(SummaryWriter, DecodersRejectACorruptedRecord) {
  TempDir tmp;
  std::string file;
  {
    SummaryWriter w(tmp.path());
    w.add_scalar("train/loss", 0.5, 1, 1700000000.0);
    w.close();
    file = read_file(w.path());
  }
  ASSERT_EQ(read_events(file).size(), 2u);
  const size_t second = 12 + 4 + test::read_le(file, 0, 8);  // start of the scalar record
  for (size_t offset : {second + 3, second + 8, second + 20, file.size() - 1}) {
    SCOPED_TRACE(offset);
    std::string bad = file;
    bad[offset] ^= 0x10;
    EXPECT_THROW(read_events(bad), std::runtime_error);
    test::write_file(tmp / "bad", bad);
    std::string out;
    EXPECT_EQ(test::run_command(std::string(DDP_PYTHON " ") + TB_ORACLE + " '" + (tmp / "bad") + "' 2>&1", out), 1);
    EXPECT_NE(out.find("CRC mismatch at offset " + std::to_string(second)), std::string::npos) << out;
  }
}

TEST(SummaryWriter, FlushesEvery100Records) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  for (int i = 1; i <= 99; ++i) w.add_scalar("x", i, i);
  EXPECT_EQ(read_events(read_file(w.path())).size(), 1u);  // only the version record so far
  w.add_scalar("x", 100, 100);
  auto events = read_events(read_file(w.path()));
  ASSERT_EQ(events.size(), 101u);
  EXPECT_EQ(events[100].step, 100);
  EXPECT_EQ(events[100].values[0].second, 100.0f);
}

// Records reach the file flush_secs (2 s) after the oldest was added, never
// before. A read that ended before 2 s must see none of them; the wait for
// them allows 10x the 2 s, so only a flusher that never runs fails it.
TEST(SummaryWriter, FlushesWithin2Seconds) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  auto since = [start = std::chrono::steady_clock::now()] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  w.add_scalar("a", 1, 1);
  w.add_scalar("b", 2, 2);
  size_t seen = 1;
  int early_reads = 0;
  while (seen == 1 && since() < 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = read_events(read_file(w.path())).size();
    if (since() < 2.0) {
      ++early_reads;
      EXPECT_EQ(seen, 1u) << "written after " << since() << " s, before flush_secs";
    }
  }
  EXPECT_EQ(seen, 3u);
  EXPECT_GE(since(), 2.0);
  std::printf("%d reads before 2 s saw nothing written\n", early_reads);
}

TEST(SummaryWriter, FlushSecsIsChecked) {
  TempDir tmp;
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    try {
      SummaryWriter w(tmp.path(), bad);
      ADD_FAILURE() << "flush_secs " << bad << " accepted";
    } catch (const ddp::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("SummaryWriter: flush_secs must be a positive"), std::string::npos)
          << e.what();
    }
  }
}

TEST(SummaryWriter, DestructorFlushes) {
  TempDir tmp;
  std::string path;
  {
    SummaryWriter w(tmp.path());
    path = w.path();
    w.add_scalar("last words", 42, 3);
  }
  auto events = read_events(read_file(path));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].values[0], (std::pair<std::string, float>{"last words", 42.0f}));
}

TEST(SummaryWriter, BadArguments) {
  TempDir tmp;
  EXPECT_THROW(SummaryWriter(""), ddp::InvalidArgument);
  SummaryWriter w(tmp.path());
  EXPECT_THROW(w.add_scalar("", 1, 1), ddp::InvalidArgument);
  for (double t : {-2.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    try {
      w.add_scalar("loss", 1, 1, t);
      ADD_FAILURE() << "wall_time " << t << " accepted";
    } catch (const ddp::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("wall_time"), std::string::npos) << e.what();
    }
  }
}

TEST(SummaryWriter, UncreatableDirectoryNamesThePath) {
  TempDir tmp;
  test::write_file(tmp / "file", "not a directory");
  std::string msg = error_of([&] { SummaryWriter w(tmp / "file/runs"); });
  EXPECT_NE(msg.find(tmp / "file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
}

TEST(SummaryWriter, UnwritableDirectoryNamesThePath) {
  TempDir tmp;
  std::string dir = tmp / "ro";
  std::filesystem::create_directory(dir);
  // Others may enter the parent (mkdtemp makes it 0700) but not write the directory.
  std::filesystem::permissions(tmp.path(), std::filesystem::perms(0755));
  std::filesystem::permissions(dir, std::filesystem::perms(0555));
  std::string msg;
  {
    test::Unprivileged guard;  // root too: read-only means read-only
    msg = error_of([&] { SummaryWriter w(dir); });
  }
  EXPECT_NE(msg.find(dir + "/events.out.tfevents."), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
}

TEST(SummaryWriter, WriteFailureIsReportedWithPathAndErrno) {
  TempDir tmp;
  SummaryWriter w(tmp.path());
  std::string msg;
  {
    test::FileSizeLimit limit(2048);  // "disk full" after ~40 records
    msg = error_of([&] {
      for (int i = 1; i <= 200; ++i) w.add_scalar("train/loss", 1.0 / i, i);
    });
  }
  EXPECT_NE(msg.find("SummaryWriter: cannot write to '" + w.path() + "': File too large"), std::string::npos) << msg;
  // The writer stays failed: later calls report the same failure.
  EXPECT_EQ(error_of([&] { w.add_scalar("more", 1, 1); }), msg);
  EXPECT_EQ(error_of([&] { w.flush(); }), msg);
  EXPECT_NO_THROW(w.close());  // already reported
}

// flush_secs 0.1: the flusher thread writes (and fails) 0.1 s after the record; the
// test waits 10x that before its next call.
TEST(SummaryWriter, BackgroundWriteFailureSurfacesOnTheNextCall) {
  TempDir tmp;
  SummaryWriter w(tmp.path(), 0.1);
  std::string msg;
  {
    test::FileSizeLimit limit(std::filesystem::file_size(w.path()));  // no room for one more byte
    w.add_scalar("train/loss", 0.5, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the flusher thread fails
    msg = error_of([&] { w.add_scalar("train/loss", 0.4, 2); });
  }
  EXPECT_NE(msg.find("cannot write to '" + w.path() + "': File too large"), std::string::npos) << msg;
  EXPECT_EQ(read_events(read_file(w.path())).size(), 1u);
}

TEST(SummaryWriter, CloseReportsAnUnseenBackgroundFailure) {
  TempDir tmp;
  SummaryWriter w(tmp.path(), 0.1);
  test::FileSizeLimit limit(std::filesystem::file_size(w.path()));
  w.add_scalar("train/loss", 0.5, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // 10x flush_secs: the flusher has failed
  EXPECT_NE(error_of([&] { w.close(); }).find("File too large"), std::string::npos);
}

}  // namespace
}  // namespace ddp::train
