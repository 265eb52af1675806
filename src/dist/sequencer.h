// A group's sequencer: the thread that runs Work continuations (Work::then) as soon as their Work completes,
// so a comm hook's second collective starts without anyone waiting, while every rank still issues the group's
// collectives in one order.
//
// The order is the program's: then() takes its place in the queue when it is called, and a collective called
// while continuations are queued or running waits in the queue behind them (the caller gets a Work at once and
// blocks only if it waits). The thread runs the queue front to back: it waits for a continuation's Work, runs the
// continuation (whose collectives go to the backend at once, being first in line), then issues the collectives
// queued behind it. With nothing queued, collectives go to the backend on the caller's thread, as before.
// The order is per group: a continuation of group A that calls group B takes B's order at the time it runs (use
// one group per chain, as DDP's hooks do). A continuation must not wait for a Work that completes only after it
// (a then() it made itself): that throws ddp::Error instead of waiting forever.
// DDP_CONTINUATIONS=waiter turns it off (a group then has no sequencer): continuations run on the first thread
// that waits, the behaviour before, kept for comparison (bench/powersgd_overlap.sh).
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "ddp/dist/work.h"

namespace ddp::detail {

class Sequencer {
 public:
  Sequencer();
  ~Sequencer();  // runs what is queued, then stops the thread
  Sequencer(const Sequencer&) = delete;
  Sequencer& operator=(const Sequencer&) = delete;

  // Runs fn on the sequencer's thread after everything queued before it; returns at once. fn must not throw.
  // Posted from the sequencer's own thread (by an entry), fn runs right after that entry and what it posted
  // before, ahead of what was queued already: an entry's posts belong to its place in the order.
  // `what` names the entry on the timeline (track "continuations"): "then", or the queued call's op.
  void post(const char* what, std::function<void()> fn);
  // True when a call made on this thread now must queue (post) to keep the order: something is queued or
  // running, and this is not the sequencer's own thread.
  bool must_queue();
  // The sequencer whose entry this thread is running, or null.
  static const Sequencer* current();

 private:
  struct Core;  // shared with the thread, which may outlive the Sequencer (see the destructor)
  std::shared_ptr<Core> core_;
};

// A Work completed later by whoever holds the Promise: with a value, another Work's outcome, or an error.
class Promise {
 public:
  struct Shared;
  Promise();
  Work work() const { return work_; }
  void set_value(at::Tensor value);
  void set_work(Work real);  // completes as `real` does (its wait runs real's steps)
  void set_error(std::exception_ptr error);
  // The Work completes from an entry of `seq`: waiting for it from inside an earlier entry of the same sequencer
  // would never end, and throws instead.
  void queued_on(const Sequencer& seq);

 private:
  std::shared_ptr<Shared> shared_;
  Work work_;
};

// False under DDP_CONTINUATIONS=waiter (read once); an unknown value is an InvalidArgument naming the variable.
bool sequencer_enabled();

}  // namespace ddp::detail
