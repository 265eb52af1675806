#include "dist/device_mark.h"

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <stdexcept>
#include <thread>

namespace ddp::detail {
namespace {

// Waits for `to`, then c10::Event's elapsedTime, where this LibTorch has them (2.x; 1.13's Debian build has no GPU
// to time, and its Event neither).
template <typename E>
auto elapsed_ms(const E& from, const E& to, int) -> decltype(to.synchronize(), from.elapsedTime(to)) {
  to.synchronize();
  return from.elapsedTime(to);
}
template <typename E>
double elapsed_ms(const E&, const E&, long) {
  throw std::logic_error("DeviceMark: this LibTorch cannot time device events");
}

// Waits for `e`: c10::Event's synchronize where this LibTorch has it (2.x), else its query (1.13's has no GPU).
template <typename E>
auto wait_for(const E& e, int) -> decltype(e.synchronize()) {
  e.synchronize();
}
template <typename E>
void wait_for(const E& e, long) {
  while (!e.query()) std::this_thread::yield();
}

}  // namespace

DeviceMark DeviceMark::now(const c10::Device& device) {
  DeviceMark m;
  m.valid_ = true;
  if (!device.is_cuda()) {  // the one place a device's kind decides: GPUs time on their stream
    m.host_ = std::chrono::steady_clock::now();
    return m;
  }
  m.event_ = std::make_shared<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);  // with timing
  m.event_->record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
  return m;
}

bool DeviceMark::reached() const { return !event_ || event_->query(); }

void DeviceMark::wait() const {
  if (event_) wait_for(*event_, 0);
}

double DeviceMark::ms_since(const DeviceMark& earlier) const {
  if (!valid_ || !earlier.valid_ || bool(event_) != bool(earlier.event_))
    throw std::logic_error("DeviceMark::ms_since: marks of different kinds, or no mark");
  if (!event_) return std::chrono::duration<double, std::milli>(host_ - earlier.host_).count();
  return elapsed_ms(*earlier.event_, *event_, 0);
}

}  // namespace ddp::detail
