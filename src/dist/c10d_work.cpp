#include "dist/c10d_work.h"

#include "dist/message.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ddp::c10d_work {
namespace {

bool mentions_timeout(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s.find("timed out") != std::string::npos || s.find("timeout") != std::string::npos;
}

class C10dWork final : public Work::Impl {
 public:
  C10dWork(ErrorContext ctx, c10::intrusive_ptr<c10d::Work> w, HealthPtr health, bool on_stream)
      : ctx_(std::move(ctx)), w_(std::move(w)), health_(std::move(health)), on_stream_(on_stream) {}

  bool is_completed() override { return w_->isCompleted(); }

  void wait(Milliseconds timeout) override {
    // c10d: 0 waits forever; otherwise throws "Operation timed out!".
    Milliseconds left = timeout.count() > 0 && !on_stream_ ? timeout : Milliseconds(0);
    if (health_ && health_->given_up && !on_stream_) left = watch(timeout);
    try {
      w_->wait(left);
    } catch (...) {
      if (health_ && !w_->isCompleted()) health_->broken.store(true);  // its worker is still blocked
      rethrow_mapped(ctx_, timeout);
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr Milliseconds kSlice{100};

  // Set by the work's future as it completes.
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };

  // In a group its members may give up: waits until the work completes, asking between slices whether the group
  // was given up (CommError then). Returns what the final c10d wait gets: 0 (forever: the work completed or is
  // completing), or 1 ms once `timeout` passed (it then throws its timeout).
  Milliseconds watch(Milliseconds timeout) {
    if (w_->isCompleted()) return Milliseconds(0);
    auto done = std::make_shared<Done>();
    bool notified = true;
    try {
      w_->getFuture()->addCallback([done](c10::ivalue::Future&) {
        std::lock_guard<std::mutex> lock(done->mu);
        done->done = true;
        done->cv.notify_all();
      });
    } catch (...) {
      notified = false;  // a work without a future (gloo's send and recv): slices of c10d's own wait
    }
    const auto deadline = timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
    for (;;) {
      const Milliseconds slice =
          std::min(kSlice, std::chrono::ceil<Milliseconds>(deadline - std::min(deadline, Clock::now())));
      if (slice.count() > 0 && notified) {  // a passed deadline skips to the checks below
        std::unique_lock<std::mutex> lock(done->mu);
        if (done->cv.wait_for(lock, slice, [&] { return done->done; })) return Milliseconds(0);
      } else if (slice.count() > 0) {
        try {
          w_->wait(slice);
          return Milliseconds(0);
        } catch (...) {
          if (w_->isCompleted()) return Milliseconds(0);  // its own error: the final wait rethrows it
        }
      }
      if (w_->isCompleted()) return Milliseconds(0);
      if (Clock::now() >= deadline) return Milliseconds(1);
      if (health_->given_up_now()) {
        health_->broken.store(true);
        throw CommError(ctx_.prefix() +
                        "communication failed: the members gave this group up while this rank waited (a member "
                        "was lost; the others rebuild the group without it)");
      }
    }
  }

  ErrorContext ctx_;
  c10::intrusive_ptr<c10d::Work> w_;
  HealthPtr health_;
  bool on_stream_;
};

}  // namespace

bool Health::given_up_now() const {
  try {
    return given_up && given_up();
  } catch (...) {
    return true;  // nobody left to ask: the members are gone
  }
}

bool Health::abandoned() const { return broken.load() || given_up_now(); }

std::string current_message() { return detail::current_exception_message(); }

void rethrow_mapped(const ErrorContext& ctx, Milliseconds timeout) {
  std::string msg = current_message();
  if (mentions_timeout(msg)) {
    std::string after = timeout.count() > 0 ? " after " + std::to_string(timeout.count()) + " ms" : "";
    throw TimeoutError(ctx.prefix() + "timed out" + after + ": " + msg +
                       " (a peer may be stuck or waiting in a different collective)");
  }
  throw CommError(ctx.prefix() + "communication failed: " + msg + " (a peer process may have exited; check its log)");
}

Work wrap(const ErrorContext& ctx, c10::intrusive_ptr<c10d::Work> work, HealthPtr health, bool on_stream) {
  return Work(std::make_shared<C10dWork>(ctx, std::move(work), std::move(health), on_stream));
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return c10d::ReduceOp::SUM;
    case ReduceOp::AVG:
      return c10d::ReduceOp::AVG;
    case ReduceOp::PRODUCT:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::MIN:
      return c10d::ReduceOp::MIN;
    case ReduceOp::MAX:
      return c10d::ReduceOp::MAX;
    case ReduceOp::BAND:
      return c10d::ReduceOp::BAND;
    case ReduceOp::BOR:
      return c10d::ReduceOp::BOR;
    case ReduceOp::BXOR:
      return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace ddp::c10d_work
