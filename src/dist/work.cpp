// Work: the backend's Impl, steps run once after completion, and a value.
#include "ddp/dist/work.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "ddp/dist/errors.h"
#include "dist/device_scope.h"
#include "dist/hook_waits.h"
#include "dist/sequencer.h"

namespace ddp {

struct Work::State {
  enum class Phase { kRunning, kFinishing, kFinished };
  std::mutex mu;
  std::condition_variable finished_cv;
  std::shared_ptr<Impl> impl;  // null: nothing to wait for
  std::vector<std::function<void()>> steps;
  Phase phase = Phase::kRunning;
  std::thread::id finisher;  // the thread running the steps
  std::exception_ptr error;
  at::Tensor value;
  std::weak_ptr<detail::Sequencer> sequencer;  // its group's: then() queues there
};

Work::Work() : state_(std::make_shared<State>()) {}

Work::Work(std::shared_ptr<Impl> impl) : state_(std::make_shared<State>()) { state_->impl = std::move(impl); }

Work Work::ready(at::Tensor value) {
  Work w;
  w.state_->value = std::move(value);
  return w;
}

bool Work::is_completed() {
  std::shared_ptr<Impl> impl;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->phase != State::Phase::kRunning || !state_->impl) return true;
    impl = state_->impl;
  }
  return impl->is_completed();
}

void Work::wait(Milliseconds timeout) {
  State& s = *state_;
  std::shared_ptr<Impl> impl;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.phase == State::Phase::kRunning) impl = s.impl;
  }
  std::exception_ptr failed;
  if (impl) {
    if (detail::waits_checked_here() && !impl->is_completed()) detail::fail_wait_in_hook("a wait for a collective");
    try {
      impl->wait(timeout);
    } catch (const TimeoutError&) {
      throw;  // not finished; the caller may wait again
    } catch (...) {
      failed = std::current_exception();
    }
  }
  std::unique_lock<std::mutex> lock(s.mu);
  // Step 1: one thread claims the steps; the others wait for it to finish them
  // (the finisher itself, waiting from inside a step, returns at once).
  if (s.phase == State::Phase::kFinishing) {
    if (s.finisher == std::this_thread::get_id()) return;
    s.finished_cv.wait(lock, [&] { return s.phase == State::Phase::kFinished; });
  }
  if (s.phase == State::Phase::kRunning) {
    s.phase = State::Phase::kFinishing;
    s.finisher = std::this_thread::get_id();
    if (failed) s.error = failed;
    // Step 2: run the steps without the lock; steps added meanwhile run too.
    while (!s.error && !s.steps.empty()) {
      std::vector<std::function<void()>> steps;
      steps.swap(s.steps);
      lock.unlock();
      std::exception_ptr step_error;
      for (auto& step : steps) {
        try {
          step();
        } catch (...) {
          step_error = std::current_exception();
          break;
        }
      }
      lock.lock();
      if (step_error) s.error = step_error;
    }
    // Step 3: finished; wake the other waiters.
    s.steps.clear();
    s.phase = State::Phase::kFinished;
    s.finished_cv.notify_all();
  }
  if (s.error) std::rethrow_exception(s.error);
}

at::Tensor Work::value(Milliseconds timeout) {
  wait(timeout);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->value;
}

Work& Work::set_value(at::Tensor value) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->value = std::move(value);
  return *this;
}

Work& Work::on_success(std::function<void()> step) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (state_->phase == State::Phase::kFinished) {
    const bool ok = !state_->error;
    lock.unlock();
    if (ok) step();
  } else {
    state_->steps.push_back(std::move(step));
  }
  return *this;
}

namespace {

// Completes with its parent.
class AfterWork final : public Work::Impl {
 public:
  explicit AfterWork(Work parent) : parent_(std::move(parent)) {}
  bool is_completed() override { return parent_.is_completed(); }
  void wait(Milliseconds timeout) override { parent_.wait(timeout); }

 private:
  Work parent_;
};

class CombinedWork final : public Work::Impl {
 public:
  explicit CombinedWork(std::vector<Work> works) : works_(std::move(works)) {}
  bool is_completed() override {
    for (auto& w : works_)
      if (!w.is_completed()) return false;
    return true;
  }
  void wait(Milliseconds timeout) override { wait_all(works_, timeout); }

 private:
  std::vector<Work> works_;
};

}  // namespace

Work& Work::bind(const std::shared_ptr<detail::Sequencer>& sequencer) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sequencer = sequencer;
  return *this;
}

Work Work::then(std::function<at::Tensor(at::Tensor)> fn) {
  std::shared_ptr<detail::Sequencer> seq;
  std::optional<c10::Stream> stream;  // the caller's, on the value's device (set when the collective was issued)
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    seq = state_->sequencer.lock();
    stream = detail::caller_stream(state_->value);
  }
  if (seq) {  // runs by itself once this Work completes, in the group's order
    detail::Promise promise;
    promise.queued_on(*seq);
    Work child = promise.work();
    child.bind(seq);
    seq->post("then", [parent = *this, fn = std::move(fn), promise, stream]() mutable {
      try {
        detail::StreamScope on(stream);  // the caller's device and stream: the wait orders it after the collective
        at::Tensor v = parent.value();
        detail::DeviceScope known(stream ? at::Tensor() : v);  // a value unknown at then(): its device, now
        promise.set_value(fn(v));
      } catch (...) {
        promise.set_error(std::current_exception());
      }
    });
    return child;
  }
  Work child(std::make_shared<AfterWork>(*this));
  Work parent = *this;
  std::weak_ptr<State> weak = child.state_;  // the child owns this step: no cycle
  child.on_success([parent, fn = std::move(fn), weak, stream]() mutable {
    detail::StreamScope on(stream);
    at::Tensor in = parent.value();
    detail::DeviceScope known(stream ? at::Tensor() : in);
    at::Tensor v = fn(in);
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->value = std::move(v);
    }
  });
  return child;
}

void wait_all(std::vector<Work>& works, Milliseconds timeout) {
  std::exception_ptr first;
  for (auto& w : works) {
    try {
      w.wait(timeout);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

Work combine(std::vector<Work> works) { return Work(std::make_shared<CombinedWork>(std::move(works))); }

}  // namespace ddp
