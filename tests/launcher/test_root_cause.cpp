// Unit tests of the failure summary's root cause (root_cause.h) and of
// reading error files (error_files.h).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "supervise/error_files.h"
#include "supervise/root_cause.h"

using namespace ddprun;

namespace {

// A waitpid() status for "exited with code c".
int exited(int code) { return code << 8; }

RankOutcome rank(int r, int status, double after_s, long long wall_us) {
  return {r, 100L + r, true, status, after_s, wall_us};
}

// A fresh directory as $TMPDIR for one test: the old value back, and the directory removed, at its end.
struct ScopedTmpdir {
  ScopedTmpdir() {
    if (const char* old = std::getenv("TMPDIR")) saved = old, had_old = true;
    char tmpl[] = "/tmp/ddprun_errdir_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    parent = tmpl;
    setenv("TMPDIR", parent.c_str(), 1);
  }
  ~ScopedTmpdir() {
    if (had_old)
      setenv("TMPDIR", saved.c_str(), 1);
    else
      unsetenv("TMPDIR");
    if (!parent.empty()) ::rmdir(parent.c_str());
  }
  std::string parent, saved;
  bool had_old = false;
};

}  // namespace

TEST(ErrorRecord, Parses) {
  auto r = parse_error_record(
      R"({"message":"open: Permission denied\nat x","rank":2,"pid":77,"timestamp_us":1700000000123456,"exit_code":1})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->message, "open: Permission denied\nat x");
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->pid, 77);
  EXPECT_EQ(r->timestamp_us, 1700000000123456LL);
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_FALSE(parse_error_record("").has_value());
  EXPECT_FALSE(parse_error_record("{\"message\":\"x\"").has_value());  // cut short
  EXPECT_FALSE(parse_error_record(R"({"message":"x"})").has_value());  // no time
  EXPECT_FALSE(parse_error_record(R"({"message":3,"timestamp_us":1})").has_value());
  auto traced = parse_error_record(R"j({"message":"m","timestamp_us":5,"backtrace":["f+0x1 (a.so)","g+0x2 (b.so)"]})j");
  ASSERT_TRUE(traced.has_value());
  EXPECT_EQ(traced->backtrace, (std::vector<std::string>{"f+0x1 (a.so)", "g+0x2 (b.so)"}));
  auto minimal = parse_error_record(R"({"message":"m","timestamp_us":5})");
  ASSERT_TRUE(minimal.has_value());
  EXPECT_EQ(minimal->rank, -1);
  EXPECT_EQ(minimal->pid, -1);
}

TEST(ErrorFileDir, CreatesReadsAndRemoves) {
  ScopedTmpdir tmp;
  ASSERT_FALSE(tmp.parent.empty());
  const std::string& parent = tmp.parent;
  std::string dir;
  {
    ErrorFileDir files;
    dir = files.path();
    ASSERT_EQ(dir.compare(0, parent.size() + 15, parent + "/ddprun-errors-"), 0) << dir;
    EXPECT_EQ(files.file_for_rank(3), dir + "/error-rank3.json");
    EXPECT_EQ(files.rank_template(), dir + "/error-rank{rank}.json");
    std::ofstream(files.file_for_rank(0)) << R"({"message":"a","rank":0,"timestamp_us":20})";
    std::ofstream(files.file_for_rank(1)) << "not json";
    std::ofstream(dir + "/error-rank2.json") << R"({"message":"b","rank":2,"timestamp_us":10})";
    std::vector<ErrorRecord> all = files.read_all();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_TRUE(all[0].message + all[1].message == "ab" || all[0].message + all[1].message == "ba");
  }
  EXPECT_NE(access(dir.c_str(), F_OK), 0) << "directory left behind";
}

// A ddprun that was SIGKILLed leaves its directory; the next one removes it, never a live one's or another's.
TEST(ErrorFileDir, StaleDirectoriesOfDeadOwnersAreRemoved) {
  ScopedTmpdir tmp;
  ASSERT_FALSE(tmp.parent.empty());
  const std::string& parent = tmp.parent;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // dies without running the destructor, as after SIGKILL
    auto* files = new ErrorFileDir;
    const std::string path = files->path() + "\n";
    if (write(pipe_fds[1], path.data(), path.size()) < 0) _exit(1);
    _exit(0);
  }
  close(pipe_fds[1]);
  char buf[512] = {};
  ASSERT_GT(read(pipe_fds[0], buf, sizeof(buf) - 1), 0);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  const std::string dead(buf, std::strlen(buf) - 1);
  ASSERT_EQ(access((dead + "/.lock").c_str(), F_OK), 0) << dead;
  const std::string foreign = parent + "/ddprun-errors-foreign";  // no lock file: not ddprun's, or being made
  ASSERT_EQ(mkdir(foreign.c_str(), 0700), 0);
  {
    ErrorFileDir live;  // its constructor swept with a 60 s minimum age: the dead one is too new
    EXPECT_EQ(access(dead.c_str(), F_OK), 0);
    EXPECT_EQ(remove_stale_error_dirs(parent, 3600), 0);
    EXPECT_EQ(remove_stale_error_dirs(parent, 0), 1);
    EXPECT_NE(access(dead.c_str(), F_OK), 0) << "the dead owner's directory is still there";
    EXPECT_EQ(access(live.path().c_str(), F_OK), 0) << "a live owner's directory was removed";
    EXPECT_EQ(access(foreign.c_str(), F_OK), 0);
  }
  rmdir(foreign.c_str());
  EXPECT_EQ(::rmdir(parent.c_str()), 0) << "something left in " << parent;
  tmp.parent.clear();
}

TEST(RootCause, EarliestErrorWinsOverExitOrder) {
  RootCauseInput in;
  in.ranks = {rank(0, SIGTERM, 1.0, 3000), rank(1, exited(1), 0.5, 2000)};
  in.errors = {{1, 101, 1900, 1, "Connection reset by peer", {}},
               {0, 100, 1500, 1, "Permission denied\nsecond line", {}}};
  in.failure_wall_us = 2000;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "root cause: rank 0 (pid 100) reported the first error, at " + wall_time_text(1500) + ":");
  EXPECT_EQ(lines[1], "  | Permission denied");
  EXPECT_EQ(lines[2], "  | second line");
}

// Where the root cause was thrown: its innermost frames, the rest left in the file.
TEST(RootCause, BacktraceOfTheRootCauseIsShown) {
  RootCauseInput in;
  in.ranks = {rank(0, exited(1), 1.0, 3000)};
  ErrorRecord e{0, 100, 1500, 1, "boom", {}};
  for (int i = 0; i < 10; ++i) e.backtrace.push_back("f" + std::to_string(i) + "+0x1 (libx.so)");
  in.errors = {e};
  in.failure_wall_us = 3000;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_EQ(lines[1], "  | boom");
  EXPECT_EQ(lines[2], "  thrown at:");
  EXPECT_EQ(lines[3], "    #0 f0+0x1 (libx.so)");
  EXPECT_EQ(lines[10], "    #7 f7+0x1 (libx.so)");
  EXPECT_EQ(lines[11], "    ... 2 more in the rank's error file");
}

TEST(RootCause, EarlyExitBeforeAnyError) {
  RootCauseInput in;
  in.ranks = {rank(0, exited(3), 2.0, 5000000), rank(1, exited(0), 0.25, 1000000), rank(2, SIGTERM, 2.1, 5100000)};
  in.errors = {{0, 100, 4900000, 1, "recv: Connection reset by peer", {}}};
  in.failure_wall_us = 5000000;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "likely root cause: rank 1 (pid 101) exited with code 0 after 0.25 s while rank(s) 0, 2 still ran");
  EXPECT_EQ(lines[1], "then rank 0 (pid 100) reported the first error, at " + wall_time_text(4900000) + ":");
  EXPECT_EQ(lines[2], "  | recv: Connection reset by peer");
}

TEST(RootCause, ExitsAfterTheFailureOrAloneAreNotEarly) {
  RootCauseInput in;
  // Rank 1 exited 0 after the failure (it handled SIGTERM); rank 0 failed.
  in.ranks = {rank(0, exited(3), 1.0, 1000), rank(1, exited(0), 1.1, 1100)};
  in.failure_wall_us = 1000;
  EXPECT_TRUE(root_cause_lines(in).empty());
  // No failure time (ddprun got a signal): nothing is early.
  in.ranks = {rank(0, exited(0), 0.1, 100), rank(1, SIGTERM, 1.0, 1000)};
  in.failure_wall_us = 0;
  EXPECT_TRUE(root_cause_lines(in).empty());
}

// A rank killed from outside is the root cause, though its peer recorded "connection reset" before ddprun reaped
// it; not when it recorded an error of its own, nor when another error came well before the kill.
TEST(RootCause, AKilledRankIsTheCauseNotThePeerThatLostIt) {
  RootCauseInput in;
  in.ranks = {rank(0, exited(1), 3.3, 3300000), rank(1, SIGKILL, 3.2, 3200500)};
  in.errors = {{0, 100, 3200100, 1, "[gloo] rank 0/2 all_reduce: Connection reset by peer", {}}};
  in.failure_wall_us = 3200500;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "root cause: rank 1 (pid 101) was killed by SIGKILL after 3.2 s (it reported no error; something "
            "outside the job, e.g. kill or the OOM killer, ended it)");
  EXPECT_EQ(lines[1], "then rank 0 (pid 100) reported, at " + wall_time_text(3200100) + ":");
  EXPECT_EQ(lines[2], "  | [gloo] rank 0/2 all_reduce: Connection reset by peer");
  // Its own error (an abort after it): that error is the cause.
  in.errors.push_back({1, 101, 3200000, 1, "std::bad_alloc", {}});
  EXPECT_EQ(root_cause_lines(in)[0],
            "root cause: rank 1 (pid 101) reported the first error, at " + wall_time_text(3200000) + ":");
  // Another rank's error 2 s before the kill: the kill followed it.
  in.errors = {{0, 100, 1200000, 1, "disk full", {}}};
  EXPECT_EQ(root_cause_lines(in)[0],
            "root cause: rank 0 (pid 100) reported the first error, at " + wall_time_text(1200000) + ":");
  // ddprun's own SIGTERM after the failure is not a cause.
  in.ranks = {rank(0, exited(1), 3.3, 3300000), rank(1, SIGTERM, 3.4, 3400000)};
  in.errors = {{0, 100, 3200100, 1, "boom", {}}};
  in.failure_wall_us = 3300000;
  EXPECT_EQ(root_cause_lines(in)[0],
            "root cause: rank 0 (pid 100) reported the first error, at " + wall_time_text(3200100) + ":");
}

// A rank that stopped because another failed (ddp::PeerFailure) often records first; the failed rank's own
// error is the cause (the issue's disk-full case: rank 1's "rank 0 failed to save" headlined).
TEST(RootCause, APeerFailureDefersToTheRankItNames) {
  RootCauseInput in;
  in.ranks = {rank(0, exited(1), 2.0, 2000000), rank(1, exited(1), 1.9, 1900000)};
  ErrorRecord peer{1, 101, 1500000, 1, "CheckpointManager: rank 0 failed to save x (its error is reported on rank 0)",
                   {}};
  peer.caused_by_rank = 0;
  in.errors = {peer, {0, 100, 1600000, 1, "cannot write x: No space left on device", {}}};
  in.failure_wall_us = 1900000;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "root cause: rank 0 (pid 100) reported the first error, at " + wall_time_text(1600000) + ":");
  EXPECT_EQ(lines[1], "  | cannot write x: No space left on device");
  // Without the named rank's record, the headline still names it, with the peer's words.
  in.errors = {peer};
  lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "root cause: rank 0 (pid 100), named by rank 1 (pid 101) at " + wall_time_text(1500000) +
                          " (rank 0 left no error of its own):");
  EXPECT_EQ(lines[1], "  | CheckpointManager: rank 0 failed to save x (its error is reported on rank 0)");
}

// A survivor's lost heartbeat names the silent rank (issue 30: a SIGSTOPped rank 3 over gloo was headlined as
// rank 0's error when the survivors' heartbeat fired before ddprun's own stop timeout).
TEST(RootCause, ALostHeartbeatNamesTheSilentRankNotTheSurvivor) {
  RootCauseInput in;
  in.ranks = {rank(0, exited(1), 2.1, 2100000), rank(1, exited(1), 2.1, 2100000), rank(2, SIGTERM, 2.2, 2200000)};
  ErrorRecord r0{0, 100, 2050000, 1, "[gloo] rank 0/3: rank 2 stopped answering: no heartbeat for 2 s", {}};
  r0.caused_by_rank = 2;
  ErrorRecord r1{1, 101, 2060000, 1, "[gloo] rank 1/3: rank 2 stopped answering: no heartbeat for 2 s", {}};
  r1.caused_by_rank = 2;
  in.errors = {r1, r0};
  in.failure_wall_us = 2100000;
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "root cause: rank 2 (pid 102), named by rank 0 (pid 100) at " + wall_time_text(2050000) +
                          " (rank 2 left no error of its own):");
  EXPECT_EQ(lines[1], "  | [gloo] rank 0/3: rank 2 stopped answering: no heartbeat for 2 s");
}

TEST(RootCause, StoppedRankOverridesEverything) {
  RootCauseInput in;
  in.ranks = {rank(0, SIGTERM, 31, 3), rank(1, SIGTERM, 31, 3)};
  in.errors = {{0, 100, 1, 1, "x", {}}};
  in.stalled_who = "rank 1 (pid 101)";
  in.stalled_signal = SIGSTOP;
  in.stalled_for_s = 30;
  EXPECT_EQ(
      root_cause_lines(in),
      std::vector<std::string>{
          "root cause: rank 1 (pid 101) was stopped (SIGSTOP) for 30 s and did not answer (--heartbeat-timeout)"});
  in.stalled_signal = 0;
  in.stalled_for_s = 2.5;
  EXPECT_EQ(root_cause_lines(in), std::vector<std::string>{"root cause: rank 1 (pid 101) was stopped (by a signal) for "
                                                           "2.5 s and did not answer (--heartbeat-timeout)"});
}

TEST(RootCause, LongMessagesAreCut) {
  RootCauseInput in;
  std::string message;
  for (int i = 0; i < 20; ++i) message += "line " + std::to_string(i) + "\n";
  in.errors = {{2, -1, 7, 1, message, {}}};
  std::vector<std::string> lines = root_cause_lines(in);
  ASSERT_EQ(lines.size(), 14u);
  EXPECT_EQ(lines[0], "root cause: rank 2 reported the first error, at " + wall_time_text(7) + ":");
  EXPECT_EQ(lines[12], "  | line 11");
  EXPECT_EQ(lines[13], "  | ...");
}

TEST(RootCause, WallTimeText) {
  // 12:34:56.789 in the local time zone, whatever it is.
  struct tm t = {};
  t.tm_year = 124;
  t.tm_mon = 0;
  t.tm_mday = 2;
  t.tm_hour = 12;
  t.tm_min = 34;
  t.tm_sec = 56;
  t.tm_isdst = -1;
  long long us = static_cast<long long>(mktime(&t)) * 1000000 + 789123;
  EXPECT_EQ(wall_time_text(us), "12:34:56.789");
}
