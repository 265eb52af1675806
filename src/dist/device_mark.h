// A point in a device's work, to time what ran there (DDP's communication statistics). On the CPU it is the host
// clock when marked. On a GPU it is an event recorded on the device's current stream, reached once the work queued
// before it has run: with nccl the host does not wait for a reduction, so only the device knows when it ended.
// Marking never waits; ms_since() and wait() wait for this mark to be reached, reached() asks without waiting.
//
//   DeviceMark start = DeviceMark::now(device);  ... queue work ...  DeviceMark end = DeviceMark::now(device);
//   if (end.reached()) ms = end.ms_since(start);
#pragma once
#include <c10/core/Device.h>

#include <chrono>
#include <memory>

namespace c10 {
struct Event;
}

namespace ddp::detail {

class DeviceMark {
 public:
  DeviceMark() = default;  // no mark: valid() is false
  static DeviceMark now(const c10::Device& device);
  bool valid() const { return valid_; }
  bool reached() const;
  // Returns once the work queued before this mark has run (at once on the CPU): the host waits for that work
  // only, not for what was queued after it.
  void wait() const;
  // Milliseconds from `earlier` to this mark, on their device; waits until this mark is reached.
  double ms_since(const DeviceMark& earlier) const;

 private:
  std::chrono::steady_clock::time_point host_{};
  std::shared_ptr<c10::Event> event_;  // a GPU's; null where the host clock serves
  bool valid_ = false;
};

}  // namespace ddp::detail
