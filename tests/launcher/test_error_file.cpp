// ddp::record_error / ddp::run_main (include/ddp/dist/error_file.h): the
// rank side of ddprun's error files.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>

#include "ddp/dist/error_file.h"
#include "ddp/dist/init.h"
#include "ddp/errors.h"
#include "supervise/error_files.h"  // ddprun's reader

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A scratch error file path in a fresh directory, set as TORCHELASTIC_ERROR_FILE and RANK.
class ErrorFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ddp_error_file_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/error-rank3.json";
    setenv("TORCHELASTIC_ERROR_FILE", path_.c_str(), 1);
    setenv("RANK", "3", 1);
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
    unsetenv("TORCHELASTIC_ERROR_FILE");
    unsetenv("RANK");
  }
  std::string dir_, path_;
};

}  // namespace

TEST_F(ErrorFile, RecordsOneJsonObject) {
  const long long before =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  EXPECT_TRUE(ddp::record_error(std::runtime_error("open /data: Permission denied"), 4));
  auto j = nlohmann::json::parse(read(path_));
  EXPECT_EQ(j["message"], "open /data: Permission denied");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["pid"], static_cast<long>(getpid()));
  EXPECT_EQ(j["exit_code"], 4);
  EXPECT_GE(j["timestamp_us"].get<long long>(), before);
  EXPECT_LT(j["timestamp_us"].get<long long>(), before + 60000000LL);
}

// A rank that stopped because rank 0 failed says so; ddprun reads it back.
TEST_F(ErrorFile, APeerFailureRecordsTheRankThatFailed) {
  EXPECT_TRUE(ddp::record_error(ddp::PeerFailed<ddp::InvalidArgument>("setting up failed on rank 0", 0)));
  const std::string text = read(path_);
  EXPECT_EQ(nlohmann::json::parse(text)["caused_by_rank"], 0);
  auto r = ddprun::parse_error_record(text);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->caused_by_rank, 0);
  EXPECT_EQ(r->message, "setting up failed on rank 0");
  EXPECT_FALSE(nlohmann::json::parse(R"({"message": "x", "timestamp_us": 1})").contains("caused_by_rank"));
  EXPECT_EQ(ddprun::parse_error_record(R"({"message": "x", "timestamp_us": 1})")->caused_by_rank, -1);
}

TEST_F(ErrorFile, KeepsTheFirstError) {
  EXPECT_TRUE(ddp::record_error("first"));
  EXPECT_FALSE(ddp::record_error("second, a consequence"));
  EXPECT_EQ(nlohmann::json::parse(read(path_))["message"], "first");
}

// ddprun's mpi mode gives every rank the same path with "{rank}" in it: each rank writes its own file.
TEST_F(ErrorFile, RankSlotInThePathIsFilledIn) {
  setenv("TORCHELASTIC_ERROR_FILE", (dir_ + "/error-rank{rank}.json").c_str(), 1);
  EXPECT_TRUE(ddp::record_error("rank 3's"));
  EXPECT_EQ(nlohmann::json::parse(read(path_))["message"], "rank 3's");  // dir_/error-rank3.json
  unsetenv("RANK");
  const std::string by_pid = dir_ + "/error-rankpid" + std::to_string(getpid()) + ".json";
  EXPECT_TRUE(ddp::record_error("a process without a rank"));
  EXPECT_EQ(nlohmann::json::parse(read(by_pid))["message"], "a process without a rank");
  unlink(by_pid.c_str());
}

TEST_F(ErrorFile, NothingWithoutTheVariable) {
  unsetenv("TORCHELASTIC_ERROR_FILE");
  EXPECT_FALSE(ddp::record_error("x"));
  setenv("TORCHELASTIC_ERROR_FILE", "", 1);
  EXPECT_FALSE(ddp::record_error("x"));
  EXPECT_NE(access(path_.c_str(), F_OK), 0);
}

TEST_F(ErrorFile, UnwritablePathSaysSoAndGoesOn) {
  setenv("TORCHELASTIC_ERROR_FILE", (dir_ + "/missing/dir/e.json").c_str(), 1);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(ddp::record_error("x"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "ddp: cannot write the error file " + dir_ +
                     "/missing/dir/e.json (TORCHELASTIC_ERROR_FILE): No such file or directory\n");
}

TEST_F(ErrorFile, RunMainCatchesPrintsRecordsAndReturnsOne) {
  char arg0[] = "tool";
  char* argv[] = {arg0, nullptr};
  testing::internal::CaptureStderr();
  int rc = ddp::run_main("tool", 1, argv, [](int, char**) -> int { throw ddp::Error("[init] boom"); });
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "tool: rank 3: [init] boom\n");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(nlohmann::json::parse(read(path_))["message"], "[init] boom");
}

TEST_F(ErrorFile, RunMainPassesArgumentsAndResult) {
  char a0[] = "tool", a1[] = "x";
  char* argv[] = {a0, a1, nullptr};
  int rc = ddp::run_main("tool", 2, argv, [](int argc, char** argv) { return argc * 10 + (argv[1][0] == 'x'); });
  EXPECT_EQ(rc, 21);
  EXPECT_NE(access(path_.c_str(), F_OK), 0);  // no error, no file
}

TEST(ErrorRank, FromTheEnvironment) {
  unsetenv("RANK");
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  EXPECT_EQ(ddp::error_rank(), 5);
  setenv("RANK", "2", 1);
  EXPECT_EQ(ddp::error_rank(), 2);
  unsetenv("RANK");
  unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(ddp::error_rank(), -1);
}

std::vector<std::string> recorded_backtrace(const std::string& path) {
  auto j = nlohmann::json::parse(read(path));
  return j.contains("backtrace") ? j["backtrace"].get<std::vector<std::string>>() : std::vector<std::string>{};
}

std::string joined(const std::vector<std::string>& frames) {
  std::string out;
  for (const auto& f : frames) out += "  " + f + "\n";
  return out;
}

bool any_frame_has(const std::vector<std::string>& frames, const std::string& text) {
  for (const auto& f : frames)
    if (f.find(text) != std::string::npos) return true;
  return false;
}

// "?+0x1aca9 (libddp_dist.so.0)": a frame without an exported name; addr2line
// names it from the library's own symbol table.
std::string addr2line(const std::string& frame) {
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&ddp::init_process_group), &info);
  const std::string offset = frame.substr(2, frame.find(' ') - 2);
  std::string out;
  if (FILE* p = popen(("addr2line -f -C -e " + std::string(info.dli_fname) + " " + offset + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
  }
  return out;
}

void init_unknown_backend() {
  ddp::InitOptions o;
  o.backend = "no-such-backend";
  ddp::init_process_group(o);
}

// The error file says where the exception was thrown: the frames, innermost
// first, with the function's name where the library exports it and always
// the library and offset (frame 0 here is env.cpp's local bad(), named by addr2line).
TEST_F(ErrorFile, BacktraceNamesTheThrowSite) {
  char arg0[] = "tool";
  char* argv[] = {arg0, nullptr};
  testing::internal::CaptureStderr();
  int rc = ddp::run_main("tool", 1, argv, [](int, char**) -> int {
    init_unknown_backend();
    return 0;
  });
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  auto frames = recorded_backtrace(path_);
  ASSERT_GE(frames.size(), 3u) << joined(frames);
  EXPECT_NE(frames[0].find(" (libddp_dist.so"), std::string::npos) << joined(frames);
  EXPECT_TRUE(any_frame_has(frames, "ddp::init_process_group(ddp::InitOptions const&)+0x")) << joined(frames);
  if (frames[0].rfind("?+0x", 0) == 0) {
    EXPECT_NE(addr2line(frames[0]).find("ddp::detail::(anonymous namespace)::bad("), std::string::npos)
        << addr2line(frames[0]);
  }
}

// LibTorch's own errors (c10::Error) are traced too.
TEST_F(ErrorFile, BacktraceOfALibTorchError) {
  try {
    at::ones({2}).view({3});
    FAIL() << "view did not throw";
  } catch (const std::exception& e) {
    ASSERT_TRUE(ddp::record_error(e));
  }
  auto frames = recorded_backtrace(path_);
  ASSERT_FALSE(frames.empty());
  EXPECT_TRUE(frames[0].find(" (libtorch_cpu.so") != std::string::npos ||
              frames[0].find(" (libc10.so") != std::string::npos)
      << joined(frames);
  EXPECT_TRUE(any_frame_has(frames, "at::")) << joined(frames);
}

// An error thrown on a worker thread and rethrown on the caller's keeps the
// worker's stack; a plain `throw;` keeps the original one.
TEST_F(ErrorFile, BacktraceSurvivesThreadsAndRethrow) {
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      init_unknown_backend();
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  ASSERT_TRUE(error);
  try {
    try {
      std::rethrow_exception(error);
    } catch (...) {
      throw;
    }
  } catch (const std::exception& e) {
    ASSERT_TRUE(ddp::record_error(e));
  }
  auto frames = recorded_backtrace(path_);
  EXPECT_TRUE(any_frame_has(frames, "ddp::init_process_group(ddp::InitOptions const&)+0x")) << joined(frames);
}

// A message without an exception has no stack to give.
TEST_F(ErrorFile, PlainMessageHasNoBacktrace) {
  EXPECT_TRUE(ddp::record_error("plain"));
  EXPECT_FALSE(nlohmann::json::parse(read(path_)).contains("backtrace"));
}
