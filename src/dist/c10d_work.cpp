#include "dist/c10d_work.h"

#include "dist/message.h"

#include <algorithm>

namespace ddp::c10d_work {
namespace {

bool mentions_timeout(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s.find("timed out") != std::string::npos || s.find("timeout") != std::string::npos;
}

class C10dWork final : public Work::Impl {
 public:
  C10dWork(ErrorContext ctx, c10::intrusive_ptr<c10d::Work> w, BrokenFlag broken, bool on_stream)
      : ctx_(std::move(ctx)), w_(std::move(w)), broken_(std::move(broken)), on_stream_(on_stream) {}

  bool is_completed() override { return w_->isCompleted(); }

  void wait(Milliseconds timeout) override {
    try {
      // c10d: 0 waits forever; otherwise throws "Operation timed out!".
      w_->wait(timeout.count() > 0 && !on_stream_ ? timeout : Milliseconds(0));
    } catch (...) {
      if (broken_ && !w_->isCompleted()) broken_->store(true);  // its worker is still blocked
      rethrow_mapped(ctx_, timeout);
    }
  }

 private:
  ErrorContext ctx_;
  c10::intrusive_ptr<c10d::Work> w_;
  BrokenFlag broken_;
  bool on_stream_;
};

}  // namespace

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

Work wrap(const ErrorContext& ctx, c10::intrusive_ptr<c10d::Work> work, BrokenFlag broken, bool on_stream) {
  return Work(std::make_shared<C10dWork>(ctx, std::move(work), std::move(broken), on_stream));
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
