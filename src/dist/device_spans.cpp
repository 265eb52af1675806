// timeline::DeviceSpan: a device's work on the timeline. Each span's two marks wait, in one list, until the device
// has reached the second; then the interval is placed on the host's clock through an anchor per device (a mark
// reached while the host read its clock) and recorded as any span.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/timeline.h"
#include "dist/device_mark.h"
#include "dist/timeline_device.h"

namespace ddp::timeline {

using ddp::detail::DeviceMark;

struct DeviceSpan::Marks {
  DeviceMark start;
  c10::Device device{c10::kCPU};
  std::optional<Span> host;  // a GPU's: the host's time queueing the work
};

namespace {

struct Pending {
  std::string track, name;
  c10::Device device;
  DeviceMark start, end;
};

struct Anchor {
  DeviceMark mark;
  int64_t host_us = 0;
};

struct DeviceSpans {
  std::mutex mu;
  std::vector<Pending> pending;
  std::map<std::string, Anchor> anchors;  // by device
};

DeviceSpans& spans() {
  static DeviceSpans* s = new DeviceSpans;  // never destroyed: flushed during exit
  return *s;
}

// The device's anchor, made at its first span: a mark the device reaches at once (its queue drained first).
const Anchor& anchor_of(DeviceSpans& s, const c10::Device& device) {
  auto it = s.anchors.find(device.str());
  if (it != s.anchors.end()) return it->second;
  Anchor a;
  a.mark = DeviceMark::now(device);
  (void)a.mark.ms_since(a.mark);  // waits until the device reaches it
  a.host_us = now_us();
  return s.anchors.emplace(device.str(), a).first->second;
}

}  // namespace

DeviceSpan::DeviceSpan(const char* track, const char* name, const c10::Device& device) : track_(track), name_(name) {
  if (!enabled()) return;
  marks_ = std::make_unique<Marks>();
  marks_->device = device;
  {
    std::lock_guard<std::mutex> lock(spans().mu);
    anchor_of(spans(), device);
  }
  if (!device.is_cpu()) marks_->host.emplace(track, name);
  marks_->start = DeviceMark::now(device);
}

DeviceSpan::~DeviceSpan() { end(); }

void DeviceSpan::end() {
  if (!marks_) return;
  const c10::Device device = marks_->device;
  if (marks_->host) marks_->host->end();
  Pending p{device.is_cpu() ? track_ : std::string(track_) + " (" + device.str() + ")", name_, device, marks_->start,
            DeviceMark::now(device)};
  marks_.reset();
  {
    std::lock_guard<std::mutex> lock(spans().mu);
    spans().pending.push_back(std::move(p));
  }
  detail::settle_device_spans(/*wait=*/false);
}

namespace detail {

void settle_device_spans(bool wait) {
  std::vector<Pending> ready;
  std::vector<Anchor> anchors;  // each ready span's device's
  {
    std::lock_guard<std::mutex> lock(spans().mu);
    auto& pending = spans().pending;
    size_t n = 0;
    while (n < pending.size() && (wait || pending[n].end.reached())) ++n;  // a device reaches its marks in order
    ready.assign(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(n));
    for (const Pending& p : ready) anchors.push_back(spans().anchors.at(p.device.str()));  // none when nothing ready
  }
  for (size_t i = 0; i < ready.size(); ++i) {
    const Pending& p = ready[i];
    const Anchor& a = anchors[i];
    const auto at = [&](const DeviceMark& m) { return a.host_us + static_cast<int64_t>(m.ms_since(a.mark) * 1000); };
    const int64_t start = at(p.start);
    complete(p.track, p.name, start, at(p.end) - start);
  }
}

}  // namespace detail
}  // namespace ddp::timeline
