// ddp::record_error / ddp::run_main (include/ddp/dist/error_file.h): the
// rank side of ddprun's error files.
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "ddp/dist/error_file.h"
#include "ddp/errors.h"

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
  const long long before = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
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

TEST_F(ErrorFile, KeepsTheFirstError) {
  EXPECT_TRUE(ddp::record_error("first"));
  EXPECT_FALSE(ddp::record_error("second, a consequence"));
  EXPECT_EQ(nlohmann::json::parse(read(path_))["message"], "first");
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
