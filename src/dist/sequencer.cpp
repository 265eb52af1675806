// Sequencer: one thread per group running its queue in order; Promise: a Work completed from elsewhere.
#include "dist/sequencer.h"

#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace ddp::detail {

namespace {
thread_local const Sequencer* t_current = nullptr;  // the sequencer whose entry this thread runs
}

struct Sequencer::Core {
  std::mutex mu;
  std::condition_variable cv;
  struct Entry {
    const char* what;
    std::function<void()> fn;
  };
  std::deque<Entry> queue;
  bool running_entry = false;
  size_t nested = 0;  // posts made by the running entry so far (they go to the front, in order)
  bool stop = false;
  std::thread thread;  // started by the first post

  bool on_thread() const { return thread.joinable() && thread.get_id() == std::this_thread::get_id(); }

  static void loop(std::shared_ptr<Core> core, const Sequencer* owner) {
    t_current = owner;
    Core& c = *core;
    std::unique_lock<std::mutex> lock(c.mu);
    for (;;) {
      c.cv.wait(lock, [&] { return c.stop || !c.queue.empty(); });
      if (c.queue.empty()) return;  // stopping, and everything ran
      Entry e = std::move(c.queue.front());
      c.queue.pop_front();
      c.running_entry = true;
      c.nested = 0;
      lock.unlock();
      {
        timeline::Span span("continuations", e.what);
        e.fn();
      }
      e.fn = nullptr;  // what it holds goes now, outside the lock
      lock.lock();
      c.running_entry = false;
    }
  }
};

Sequencer::Sequencer() : core_(std::make_shared<Core>()) {}

Sequencer::~Sequencer() {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stop = true;
  }
  core_->cv.notify_all();
  if (!core_->thread.joinable()) return;
  if (core_->on_thread())
    core_->thread.detach();  // the last owner let go inside an entry: the loop ends by itself, holding the core
  else
    core_->thread.join();  // what is queued runs first
}

void Sequencer::post(const char* what, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (core_->on_thread())
      core_->queue.insert(core_->queue.begin() + static_cast<std::ptrdiff_t>(core_->nested++), {what, std::move(fn)});
    else
      core_->queue.push_back({what, std::move(fn)});
    if (!core_->thread.joinable()) core_->thread = std::thread(&Core::loop, core_, this);
  }
  core_->cv.notify_all();
}

const Sequencer* Sequencer::current() { return t_current; }

bool Sequencer::must_queue() {
  std::lock_guard<std::mutex> lock(core_->mu);
  if (core_->queue.empty() && !core_->running_entry) return false;
  return !core_->on_thread();
}

struct Promise::Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Work real;  // set_work: waited through
  bool has_real = false;
  std::exception_ptr error;
  const Sequencer* queue = nullptr;  // the sequencer an entry of which completes it
};

namespace {

class PromisedWork final : public Work::Impl {
 public:
  explicit PromisedWork(std::shared_ptr<Promise::Shared> s) : s_(std::move(s)) {}

  bool is_completed() override {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (!s_->done) return false;
    if (!s_->has_real) return true;
    Work real = s_->real;
    lock.unlock();
    return real.is_completed();
  }

  void wait(Milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(s_->mu);
    auto done = [&] { return s_->done; };
    if (!s_->done && s_->queue && s_->queue == Sequencer::current())
      throw Error(
          "a continuation waits for a Work that its group's sequencer completes only after this "
          "continuation (a then() or a call it queued itself): it would wait forever; wait for it outside "
          "the continuation, or chain with then()");
    if (timeout.count() > 0) {
      if (!s_->cv.wait_for(lock, timeout, done))
        throw TimeoutError("timed out after " + std::to_string(timeout.count()) +
                           " ms waiting for the operation's turn: the continuations queued before it on this group "
                           "have not finished (a peer may be stuck)");
    } else {
      s_->cv.wait(lock, done);
    }
    if (s_->error) std::rethrow_exception(s_->error);
    if (!s_->has_real) return;
    Work real = s_->real;
    lock.unlock();
    Milliseconds left = timeout;
    if (timeout.count() > 0) {
      const auto spent = std::chrono::duration_cast<Milliseconds>(std::chrono::steady_clock::now() - start);
      left = std::max(Milliseconds(1), timeout - spent);
    }
    real.wait(left);
  }

 private:
  std::shared_ptr<Promise::Shared> s_;
};

}  // namespace

Promise::Promise() : shared_(std::make_shared<Shared>()), work_(std::make_shared<PromisedWork>(shared_)) {}

void Promise::set_value(at::Tensor value) {
  work_.set_value(std::move(value));
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->done = true;
  }
  shared_->cv.notify_all();
}

void Promise::set_work(Work real) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->real = std::move(real);
    shared_->has_real = true;
    shared_->done = true;
  }
  shared_->cv.notify_all();
}

void Promise::queued_on(const Sequencer& seq) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->queue = &seq;
}

void Promise::set_error(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->error = std::move(error);
    shared_->done = true;
  }
  shared_->cv.notify_all();
}

bool sequencer_enabled() {
  static const bool on = [] {
    return launch_env::choice(launch_env::kContinuations).value_or("sequencer") == "sequencer";
  }();
  return on;
}

}  // namespace ddp::detail
