#include "dist/wait_report.h"

#include <cstdio>
#include <map>
#include <mutex>

namespace ddp::detail {
namespace {

std::mutex g_mu;
int64_t g_next = 1;
std::map<int64_t, PendingWait>& waits() {
  static auto* m = new std::map<int64_t, PendingWait>();  // never destroyed: waits may end during exit
  return *m;
}

}  // namespace

WaitScope::WaitScope(const Call& c) {
  std::lock_guard<std::mutex> lock(g_mu);
  id_ = g_next++;
  waits()[id_] =
      PendingWait{id_, c.ctx.prefix(), c.seq, is_p2p(c.op), c.bytes, c.timeout, std::chrono::steady_clock::now()};
}

WaitScope::~WaitScope() {
  std::lock_guard<std::mutex> lock(g_mu);
  waits().erase(id_);
}

std::vector<PendingWait> pending_waits() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<PendingWait> out;
  for (const auto& kv : waits()) out.push_back(kv.second);
  return out;
}

std::string format_seconds(double s) {
  char buf[64];
  if (s >= 100 || s == static_cast<int64_t>(s)) {
    std::snprintf(buf, sizeof(buf), "%.0f", s);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", s);  // 0.5, 1.25, 12.5, 0.001
  }
  return buf;
}

std::string format_bytes(int64_t b) {
  char buf[64];
  if (b < 1024)
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  else if (b < (1 << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / 1048576.0);
  return buf;
}

}  // namespace ddp::detail
