// dist/sequencer.h: the order a group's sequencer runs its queue in, and Promise (the collective suite checks the
// order of collectives across ranks: ContinuationsInOrder).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/dist/errors.h"
#include "dist/sequencer.h"

namespace {

using ddp::detail::Promise;
using ddp::detail::Sequencer;

struct Log {
  std::mutex mu;
  std::vector<std::string> entries;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(e);
  }
};

TEST(Sequencer, RunsInPostOrderAndAnEntrysPostsRightAfterIt) {
  Log log;
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  {
    Sequencer seq;
    seq.post("a", [&] {
      open.wait();  // b and c are queued by now
      log.add("a");
      seq.post("a1", [&] { log.add("a1"); });
      seq.post("a2", [&] { log.add("a2"); });
    });
    seq.post("b", [&] { log.add("b"); });
    seq.post("c", [&] { log.add("c"); });
    gate.set_value();
  }  // the destructor runs what is queued
  EXPECT_EQ(log.entries, (std::vector<std::string>{"a", "a1", "a2", "b", "c"}));
}

TEST(Sequencer, CallsQueueWhileEntriesAreQueuedOrRunningButNotFromAnEntry) {
  Sequencer seq;
  EXPECT_FALSE(seq.must_queue());  // idle: call at once
  std::promise<void> gate, inside;
  std::atomic<bool> from_entry{true};
  seq.post("x", [&] {
    from_entry = seq.must_queue();
    inside.set_value();
    gate.get_future().wait();
  });
  inside.get_future().wait();
  EXPECT_TRUE(seq.must_queue());    // running: queue behind it
  EXPECT_FALSE(from_entry.load());  // the entry itself calls at once
  gate.set_value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (seq.must_queue() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(seq.must_queue());
}

TEST(Promise, CompletesWithAValueAnotherWorkOrAnError) {
  Promise p;
  ddp::Work w = p.work();
  EXPECT_FALSE(w.is_completed());
  EXPECT_THROW(w.wait(std::chrono::milliseconds(10)), ddp::TimeoutError);  // not yet
  std::thread t([p]() mutable { p.set_value(at::full({2}, 7.0)); });
  EXPECT_EQ(w.value().sum().item<double>(), 14.0);
  t.join();

  Promise q;
  bool step_ran = false;
  ddp::Work real = ddp::Work::ready(at::full({1}, 3.0));
  q.set_work(real);
  q.work().on_success([&] { step_ran = true; });
  q.work().wait();
  EXPECT_TRUE(step_ran);

  Promise e;
  e.set_error(std::make_exception_ptr(ddp::Error("queued call failed")));
  try {
    e.work().wait();
    FAIL() << "expected the error";
  } catch (const ddp::Error& err) {
    EXPECT_STREQ(err.what(), "queued call failed");
  }
}

}  // namespace
