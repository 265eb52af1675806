// The per-case deadline of every gtest binary (case_deadline.h).
#include "support/case_deadline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace ddp::testing {
namespace {

constexpr int kHang = 124;

// The watcher thread is detached and its state never freed: a forked child (a rank some tests start) that exits
// through static destructors must not join or lock anything of it.
class CaseDeadline : public ::testing::EmptyTestEventListener {
 public:
  explicit CaseDeadline(double seconds) : state_(new State{seconds}) {
    std::thread([s = state_] { watch(*s); }).detach();
  }

  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->name = std::string(info.test_suite_name()) + "." + info.name();
    state_->deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(state_->seconds));
    state_->running = true;
    state_->changed.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->running = false;
    state_->changed.notify_all();
  }

 private:
  struct State {
    double seconds;
    std::mutex mutex;
    std::condition_variable changed;
    std::string name;
    std::chrono::steady_clock::time_point deadline;
    bool running = false;
  };

  static void watch(State& s) {
    std::unique_lock<std::mutex> lock(s.mutex);
    for (;;) {
      if (!s.running) {
        s.changed.wait(lock);
      } else if (s.changed.wait_until(lock, s.deadline) == std::cv_status::timeout && s.running &&
                 std::chrono::steady_clock::now() >= s.deadline) {
        std::fprintf(stderr,
                     "\n[ddp-test] %s is still running after its %g s (DDP_TEST_CASE_TIMEOUT, 10x its time on an "
                     "idle machine): a hang; ending the process\n",
                     s.name.c_str(), s.seconds);
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(kHang);
      }
    }
  }

  State* state_;
};

double case_timeout() {
  const char* text = std::getenv("DDP_TEST_CASE_TIMEOUT");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  if (*end != '\0' || !(seconds > 0)) {
    std::fprintf(stderr, "[ddp-test] DDP_TEST_CASE_TIMEOUT='%s' is not a positive number of seconds\n", text);
    std::exit(2);
  }
  return seconds;
}

}  // namespace

void watch_case_deadlines() {
  const double seconds = case_timeout();
  if (seconds > 0) ::testing::UnitTest::GetInstance()->listeners().Append(new CaseDeadline(seconds));  // gtest owns it
}

}  // namespace ddp::testing
