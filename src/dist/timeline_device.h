// Between the timeline and its device spans (device_spans.cpp).
#pragma once

namespace ddp::timeline::detail {

// Records the device spans whose end the device has reached (wait: all of them, waiting for each).
void settle_device_spans(bool wait);

}  // namespace ddp::timeline::detail
