#include "dist/member_pulse.h"

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "dist/message.h"

namespace ddp::detail {
namespace {

std::string pulse_key(int id) { return "pulse/" + std::to_string(id); }

}  // namespace

struct MemberPulse::State {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

MemberPulse::MemberPulse(StorePtr store, int id, Milliseconds interval, std::string who)
    : state_(std::make_shared<State>()) {
  const Milliseconds every = std::max(interval, Milliseconds(1));
  state_->thread = std::thread([s = state_, store = std::move(store), key = pulse_key(id), every, who] {
    std::unique_lock<std::mutex> lock(s->mu);
    while (!s->stop) {
      lock.unlock();
      try {
        store->add(key, 1);
      } catch (...) {
        std::fprintf(stderr, "%sits pulse stopped: %s\n", who.c_str(), current_exception_message().c_str());
        std::fflush(stderr);
        return;
      }
      lock.lock();
      s->cv.wait_for(lock, every, [&] { return s->stop; });
    }
  });
}

MemberPulse::~MemberPulse() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

Milliseconds PulseWatch::still(int id) {
  const auto now = Clock::now();
  auto [it, first] = seen_.try_emplace(id);
  Seen& s = it->second;
  if (first || now - s.read >= interval_) {
    const int64_t value = store_->add(pulse_key(id), 0);  // 0 until the member's first beat
    if (first || value != s.value) s.moved = now;
    s.value = value;
    s.read = now;
  }
  return std::chrono::duration_cast<Milliseconds>(now - s.moved);
}

}  // namespace ddp::detail
