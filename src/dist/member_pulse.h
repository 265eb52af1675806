// A member's pulse (ddp::Membership): while the member lives, a thread of its own adds 1 to "pulse/<id>" in the
// membership store every `interval`. A rebuild uses it to tell a member that is slow to come (a long save, a long
// step) from one that stopped or was cut off: the slow one's pulse moves, so it is waited for (up to the
// collective timeout); the stopped one's does not, so it is counted lost once it has been still for `settle`.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ddp/dist/store.h"
#include "ddp/dist/types.h"

namespace ddp::detail {

class MemberPulse {
 public:
  // Beats over `store` (the membership store, or a connection of its own to it). A beat that throws is said once
  // on stderr, prefixed by `who`, and the pulse stops (the others count the member lost if it does not come).
  MemberPulse(StorePtr store, int id, Milliseconds interval, std::string who);
  ~MemberPulse();  // stops the thread; a beat in flight ends within its store's timeout
  MemberPulse(const MemberPulse&) = delete;
  MemberPulse& operator=(const MemberPulse&) = delete;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// When each member's pulse was last seen to move, as one observer reads them (each at most every `interval`).
class PulseWatch {
 public:
  PulseWatch(StorePtr store, Milliseconds interval) : store_(std::move(store)), interval_(interval) {}
  // How long `id`'s pulse has been still: since this watch first looked, when it has not moved since.
  Milliseconds still(int id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Seen {
    int64_t value = 0;
    Clock::time_point moved, read;
  };
  StorePtr store_;
  Milliseconds interval_;
  std::map<int, Seen> seen_;
};

}  // namespace ddp::detail
