#include "ddp/dist/work.h"

#include <exception>

#include "ddp/dist/errors.h"

namespace ddp {

struct Work::State {
  std::mutex mu;
  std::shared_ptr<Impl> impl;  // null: nothing to wait for
  std::vector<std::function<void()>> pending;
  bool finished = false;  // the impl is done and continuations ran
  std::exception_ptr error;
};

Work::Work() : state_(std::make_shared<State>()) {}

Work::Work(std::shared_ptr<Impl> impl) : state_(std::make_shared<State>()) {
  state_->impl = std::move(impl);
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished || !state_->impl || state_->impl->is_completed();
}

void Work::finish_locked(State& s) {
  if (s.finished) return;
  s.finished = true;
  for (auto& fn : s.pending) {
    try {
      fn();
    } catch (...) {
      s.error = std::current_exception();
      break;
    }
  }
  s.pending.clear();
}

void Work::wait(Milliseconds timeout) {
  State& s = *state_;
  std::shared_ptr<Impl> impl;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.finished) impl = s.impl;
  }
  if (impl) {
    try {
      impl->wait(timeout);
    } catch (const TimeoutError&) {
      throw;  // not finished; the caller may wait again
    } catch (...) {
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.finished) {
        s.finished = true;
        s.error = std::current_exception();
        s.pending.clear();
      }
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  finish_locked(s);
  if (s.error) std::rethrow_exception(s.error);
}

Work& Work::then(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->finished) {
    if (!state_->error) fn();
  } else {
    state_->pending.push_back(std::move(fn));
  }
  return *this;
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

namespace {
class CombinedWork : public Work::Impl {
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

Work combine(std::vector<Work> works) {
  return Work(std::make_shared<CombinedWork>(std::move(works)));
}

}  // namespace ddp
