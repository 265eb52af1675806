// A backward's communication time, as DDPStats counts it: from the first reduction launched to the last one done
// (comm_ms), and the part of it after the gradients' computation ended (exposed_ms). The marks are on the
// gradients' device (dist/device_mark.h); a backward's figures are added once its last mark is reached: at once on
// the CPU, and on a GPU (whose host never waits for a reduction) when a later backward or stats() finds it reached.
// DDP's reducer and FSDP's units keep one each.
#pragma once
#include <vector>

#include "ddp/parallel/ddp_stats.h"
#include "dist/device_mark.h"

namespace ddp::detail {

class CommTimings {
 public:
  // One backward: first_launch may be invalid (nothing launched before its end): it counts from backward_end.
  void add(const DeviceMark& first_launch, const DeviceMark& backward_end, const DeviceMark& done) {
    stats_.iterations++;
    unsettled_.push_back({first_launch.valid() ? first_launch : backward_end, backward_end, done});
    settle(/*wait=*/false);
  }
  // Every backward's figures, waiting for those not reached yet.
  const DDPStats& stats() const {
    settle(/*wait=*/true);
    return stats_;
  }

 private:
  struct Timing {
    DeviceMark first_launch, backward_end, done;
  };
  void settle(bool wait) const {
    size_t n = 0;
    for (; n < unsettled_.size() && (wait || unsettled_[n].done.reached()); ++n) {
      const Timing& t = unsettled_[n];
      stats_.comm_ms += t.done.ms_since(t.first_launch);
      stats_.exposed_ms += t.done.ms_since(t.backward_end);
    }
    unsettled_.erase(unsettled_.begin(), unsettled_.begin() + static_cast<std::ptrdiff_t>(n));
  }

  mutable std::vector<Timing> unsettled_;
  mutable DDPStats stats_;
};

}  // namespace ddp::detail
