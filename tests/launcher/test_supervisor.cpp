// Supervisor on its own, with small /bin/sh children.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "launch/rank_env.h"
#include "supervise/supervisor.h"

using namespace ddprun;

namespace {

struct Collect : LineHandler {
  std::vector<std::string> lines;
  void on_line(size_t child, Stream stream, std::string_view line) override {
    lines.push_back(std::to_string(child) + (stream == Stream::kOut ? " out " : " err ") + std::string(line));
  }
};

ManagedChild sh(const std::string& script) {
  ManagedChild c;
  c.spec.exec_path = "/bin/sh";
  c.spec.argv = {"sh", "-c", script};
  c.spec.env = current_environment();
  c.spec.label = "test child";
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(Supervisor, CollectsLinesAndStatuses) {
  Collect lines;
  Supervisor supervisor(5, &lines);
  SupervisorResult r = supervisor.run({sh("echo a; echo b >&2; printf c"), sh("exit 0")});
  EXPECT_EQ(r.first_failed, -1);
  EXPECT_EQ(r.received_signal, 0);
  EXPECT_EQ(r.stop_signal, 0);
  ASSERT_EQ(r.children.size(), 2u);
  for (const ChildResult& c : r.children) {
    EXPECT_TRUE(c.reaped);
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
    EXPECT_FALSE(c.sent_stop);
  }
  std::vector<std::string> sorted = lines.lines;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"0 err b", "0 out a", "0 out c"}));
}

TEST(Supervisor, FirstFailureStopsTheOthers) {
  Collect lines;
  Supervisor supervisor(5, &lines);
  auto start = std::chrono::steady_clock::now();
  SupervisorResult r = supervisor.run({sh("sleep 300"), sh("sleep 0.1; exit 5"), sh("sleep 300")});
  EXPECT_LT(seconds_since(start), 4.0);  // ~0.15 s: a hang detector with 20x headroom (unstopped: 300 s)
  EXPECT_EQ(r.first_failed, 1);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(WEXITSTATUS(r.children[1].status), 5);
  for (size_t i : {0u, 2u}) {
    EXPECT_TRUE(r.children[i].sent_stop);
    EXPECT_FALSE(r.children[i].sent_kill);
    EXPECT_TRUE(WIFSIGNALED(r.children[i].status) && WTERMSIG(r.children[i].status) == SIGTERM);
  }
  EXPECT_FALSE(r.children[1].sent_stop);
}

TEST(Supervisor, SigkillAfterGrace) {
  Collect lines;
  Supervisor supervisor(0.3, &lines);
  auto start = std::chrono::steady_clock::now();
  // The shell and its sleep both ignore SIGTERM; SIGKILL to the group ends both.
  SupervisorResult r = supervisor.run({sh("trap '' TERM; sleep 300; echo survived"), sh("sleep 0.1; exit 2")});
  double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 0.3);
  EXPECT_LT(elapsed, 5.0);  // ~0.45 s (0.1 + the 0.3 s grace): 10x headroom; never killed: 300 s
  EXPECT_EQ(r.first_failed, 1);
  EXPECT_TRUE(r.children[0].sent_stop);
  EXPECT_TRUE(r.children[0].sent_kill);
  EXPECT_TRUE(WIFSIGNALED(r.children[0].status) && WTERMSIG(r.children[0].status) == SIGKILL);
  EXPECT_TRUE(lines.lines.empty());
}

TEST(Supervisor, StoppedChildFailsTheJobAfterTheStopTimeout) {
  Collect lines;
  Supervisor supervisor(5, &lines);
  supervisor.set_stop_timeout(0.3);
  auto start = std::chrono::steady_clock::now();
  // The child stops itself and stays stopped: it gets SIGKILL at the timeout, the other SIGTERM.
  SupervisorResult r = supervisor.run({sh("sleep 300"), sh("kill -STOP $$; sleep 300")});
  double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 0.3);
  EXPECT_LT(elapsed, 4.0);  // ~0.35 s: 10x headroom; never noticed: 300 s
  EXPECT_EQ(r.first_failed, -1);
  EXPECT_EQ(r.stalled, 1);
  EXPECT_EQ(r.stalled_who, "test child (pid " + std::to_string(r.children[1].pid) + ")");
  EXPECT_EQ(r.stalled_signal, SIGSTOP);
  EXPECT_GE(r.stalled_for_s, 0.3);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_TRUE(WIFSIGNALED(r.children[0].status) && WTERMSIG(r.children[0].status) == SIGTERM);
  EXPECT_TRUE(WIFSIGNALED(r.children[1].status) && WTERMSIG(r.children[1].status) == SIGKILL);
  for (const ChildResult& c : r.children) EXPECT_FALSE(c.sent_kill);  // not the grace period's SIGKILL (5 s)
}

TEST(Supervisor, ContinuedChildGoesOn) {
  Collect lines;
  Supervisor supervisor(5, &lines);
  supervisor.set_stop_timeout(30);
  // The child stops itself; a sibling continues it once it is stopped.
  SupervisorResult r = supervisor.run(
      {sh("kill -STOP $$; echo resumed"),
       sh("for i in $(seq 200); do p=$(pgrep -P $PPID -f 'resume[d]'); "
          "[ -n \"$p\" ] && grep -q '^State:.*stopped' /proc/$p/status && break; sleep 0.05; done; kill -CONT $p")});
  EXPECT_EQ(r.stalled, -1);
  EXPECT_EQ(r.first_failed, -1);
  for (const ChildResult& c : r.children) EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0);
  EXPECT_EQ(lines.lines, (std::vector<std::string>{"0 out resumed"}));
}

TEST(Supervisor, RecordsExitTimes) {
  Collect lines;
  Supervisor supervisor(5, &lines);
  SupervisorResult r = supervisor.run({sh("exit 0"), sh("sleep 0.3")});
  ASSERT_EQ(r.children.size(), 2u);
  EXPECT_GE(r.children[0].exit_after_s, 0.0);
  EXPECT_GE(r.children[1].exit_after_s, 0.3);
  EXPECT_LT(r.children[0].exit_after_s, r.children[1].exit_after_s);
  EXPECT_LT(r.children[0].exit_wall_us, r.children[1].exit_wall_us);
}
