// Work: values, continuations (run once, outside any lock), errors, is_completed.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ddp/dist/errors.h"
#include "ddp/dist/work.h"

namespace ddp {
namespace {

// An operation that completes (or fails) when the test says so.
class Manual final : public Work::Impl {
 public:
  void complete(std::exception_ptr error = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
    cv_.notify_all();
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void wait(Milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout.count() > 0) {
      if (!cv_.wait_for(lock, timeout, [&] { return done_; })) throw TimeoutError("manual: timed out");
    } else {
      cv_.wait(lock, [&] { return done_; });
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

TEST(Work, ValueAndChainedContinuations) {
  Work w = Work::ready(at::arange(4, at::kDouble));
  Work chained = w.then([](at::Tensor v) { return v * 2; }).then([](at::Tensor v) { return v + 1; });
  EXPECT_TRUE(at::equal(chained.value(), at::tensor({1.0, 3.0, 5.0, 7.0}, at::kDouble)));
  EXPECT_TRUE(at::equal(w.value(), at::arange(4, at::kDouble)));  // the parent keeps its own value
  EXPECT_FALSE(Work().value().defined());
}

TEST(Work, IsCompletedNeverRunsSteps) {
  auto op = std::make_shared<Manual>();
  Work w(op);
  int steps = 0;
  w.on_success([&] { ++steps; });
  EXPECT_FALSE(w.is_completed());
  op->complete();
  EXPECT_TRUE(w.is_completed());
  EXPECT_EQ(steps, 0);
  w.wait();
  w.wait();
  EXPECT_EQ(steps, 1);
}

// A continuation that uses its own Work: no deadlock (it ran under the Work's
// lock before, and waited for itself).
TEST(Work, ContinuationMayUseItsOwnWork) {
  auto op = std::make_shared<Manual>();
  Work w(op);
  w.set_value(at::ones({2}));
  bool saw_completed = false, value_ok = false;
  int nested = 0;
  w.on_success([&, w]() mutable {
    saw_completed = w.is_completed();
    w.wait();  // returns at once on the thread running the steps
    value_ok = w.value().defined();
    w.on_success([&] { ++nested; });  // a step added by a step runs too
  });
  op->complete();
  std::thread waiter([&] { w.wait(); });
  waiter.join();
  EXPECT_TRUE(saw_completed);
  EXPECT_TRUE(value_ok);
  EXPECT_EQ(nested, 1);
}

TEST(Work, StepsRunOnceWhateverTheNumberOfWaiters) {
  auto op = std::make_shared<Manual>();
  Work w(op);
  std::atomic<int> runs{0};
  w.on_success([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // widen the window for a second run
    ++runs;
  });
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) waiters.emplace_back([w]() mutable { w.wait(); });
  op->complete();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(runs.load(), 1);
  int late = 0;
  w.on_success([&] { ++late; });  // added after completion: runs at once
  EXPECT_EQ(late, 1);
}

TEST(Work, ErrorsReachEveryWaiterAndSkipSteps) {
  auto op = std::make_shared<Manual>();
  Work w(op);
  bool ran = false;
  w.on_success([&] { ran = true; });
  Work child = w.then([](at::Tensor v) { return v; });
  op->complete(std::make_exception_ptr(CommError("[gloo] rank 1/2 all_reduce: peer gone")));
  EXPECT_THROW(w.wait(), CommError);
  EXPECT_THROW(w.wait(), CommError);  // again: the same error
  EXPECT_THROW(child.value(), CommError);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(w.is_completed());
}

TEST(Work, TimeoutLeavesTheWorkWaitable) {
  auto op = std::make_shared<Manual>();
  Work w(op);
  EXPECT_THROW(w.wait(Milliseconds(10)), TimeoutError);
  EXPECT_FALSE(w.is_completed());
  op->complete();
  EXPECT_NO_THROW(w.wait());
}

TEST(Work, StepErrorIsRethrown) {
  Work w;
  Work child = w.then([](at::Tensor) -> at::Tensor { throw Error("decompression failed"); });
  try {
    child.wait();
    ADD_FAILURE() << "expected ddp::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "decompression failed");
  }
}

}  // namespace
}  // namespace ddp
