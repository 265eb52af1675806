#include "dist/heartbeat.h"

#include "ddp/dist/error_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "dist/env.h"
#include "dist/message.h"
#include "dist/wait_report.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool mentions_timeout(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s.find("timeout") != std::string::npos || s.find("timed out") != std::string::npos;
}

// Counters as decimal text under "ddp_hb/<rank>"; "done" at the end.
class StoreBeatChannel final : public BeatChannel {
 public:
  StoreBeatChannel(StorePtr store, int rank, std::string address)
      : store_(std::move(store)), rank_(rank), address_(std::move(address)) {}
  void publish(int64_t value) override {
    const std::string s = value == kDone ? "done" : std::to_string(value);
    store_->set(key(rank_), std::vector<uint8_t>(s.begin(), s.end()));
  }
  int64_t latest(int peer) override {
    if (!store_->check({key(peer)})) return kNone;  // not started yet: get() would wait for it
    std::vector<uint8_t> v = store_->get(key(peer));
    std::string s(v.begin(), v.end());
    return s == "done" ? kDone : std::strtoll(s.c_str(), nullptr, 10);
  }
  std::string where() const override { return "its store at " + address_; }
  bool hosted_by_rank0() const override { return true; }

 private:
  static std::string key(int rank) { return "ddp_hb/" + std::to_string(rank); }
  StorePtr store_;
  int rank_;
  std::string address_;
};

}  // namespace

struct Heartbeat::State {
  HeartbeatConfig cfg;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  // Written by the beater, read by the monitor (under mu).
  std::vector<Clock::time_point> seen;  // when each peer's counter last moved
  std::vector<int64_t> last;            // each peer's last counter
  std::vector<bool> done;               // peers that ended normally
  Clock::time_point last_ok;            // end of the last round the channel answered
  bool channel_closed = false;
  std::thread beater, monitor;
  std::mutex finish_mu;
  bool finished = false;

  std::string prefix() const {
    return "[" + cfg.backend + "] rank " + std::to_string(cfg.rank) + "/" + std::to_string(cfg.world_size) + ": ";
  }
  Clock::duration period() const { return std::max<Clock::duration>(cfg.timeout / 10, std::chrono::milliseconds(10)); }

  void beat_loop();
  void monitor_loop();
  // Stops both threads and writes the "done" mark; once.
  void finish();
  std::string late_peers(Clock::time_point now, Clock::duration late) const;
};

void Heartbeat::State::beat_loop() {
  int64_t count = 0;
  std::unique_lock<std::mutex> lock(mu);
  while (!stop) {
    lock.unlock();
    try {
      cfg.channel->publish(++count);
      for (int p = 0; p < cfg.world_size; ++p) {
        if (p == cfg.rank) continue;
        {
          std::lock_guard<std::mutex> g(mu);
          if (done[p]) continue;
        }
        const int64_t v = cfg.channel->latest(p);
        std::lock_guard<std::mutex> g(mu);
        if (v == BeatChannel::kDone)
          done[p] = true;
        else if (v != last[p])
          last[p] = v, seen[p] = Clock::now();
      }
      lock.lock();
      last_ok = Clock::now();
    } catch (...) {
      std::string msg = current_exception_message();
      lock.lock();
      if (!mentions_timeout(msg)) {  // the channel closed: rank 0's store ended, or MPI is finalizing
        channel_closed = true;
        cv.notify_all();
        return;
      }  // else silence: the monitor sees last_ok age
    }
    cv.wait_for(lock, period(), [this] { return stop; });
  }
}

std::string Heartbeat::State::late_peers(Clock::time_point now, Clock::duration late) const {
  std::ostringstream s;
  for (int p = 0; p < cfg.world_size; ++p) {
    if (p == cfg.rank || done[p] || now - seen[p] <= late) continue;
    s << (s.tellp() > 0 ? ", " : "") << "rank " << p << " (" << format_seconds(seconds(now - seen[p])) << " s)";
  }
  return s.str();
}

void Heartbeat::State::monitor_loop() {
  const auto tick =
      std::clamp<Clock::duration>(cfg.timeout / 20, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
  const std::string limit = format_seconds(seconds(cfg.timeout)) + " s";
  std::map<int64_t, int> reported;  // wait id -> reports printed
  std::unique_lock<std::mutex> lock(mu);
  Clock::time_point prev = Clock::now();
  while (!cv.wait_for(lock, tick, [this] { return stop || channel_closed; })) {
    const Clock::time_point now = Clock::now();
    if (now - prev > cfg.timeout / 2) {  // this process was stopped or starved: blame no peer for it
      std::fill(seen.begin(), seen.end(), now);
      last_ok = now;
    }
    prev = now;
    if (now - last_ok > cfg.timeout) {
      const bool rank0 = cfg.channel->hosted_by_rank0();
      end_rank(prefix() + (rank0 ? "rank 0 stopped answering: " : "the heartbeat stopped: ") + cfg.channel->where() +
                   " gave no reply for " + limit + " (DDP_HEARTBEAT_TIMEOUT); ending this rank",
               rank0 ? 0 : cfg.rank);
    }
    std::ostringstream stale;
    int n = 0, first = -1;
    for (int p = 0; p < cfg.world_size; ++p) {
      if (p == cfg.rank || done[p] || now - seen[p] <= cfg.timeout) continue;
      stale << (n++ ? ", " : "") << p;
      if (first < 0) first = p;
    }
    if (n > 0) {
      end_rank(prefix() + (n == 1 ? "rank " : "ranks ") + stale.str() + " stopped answering: no heartbeat for " +
                   limit + " (DDP_HEARTBEAT_TIMEOUT); ending this rank",
               first);
    }
    for (const PendingWait& w : pending_waits()) {
      const double waited = seconds(now - w.start);
      int& k = reported[w.id];
      if (waited < cfg.report_interval_s * (k + 1)) continue;
      ++k;
      std::string late = late_peers(now, 3 * period());
      std::string timeout = w.timeout.count() > 0 ? format_seconds(w.timeout.count() / 1000.0) + " s" : "none";
      const std::string where = w.seq > 0 ? "in collective #" + std::to_string(w.seq)
                                : w.p2p   ? std::string("in this point-to-point call")
                                          : std::string("queued behind this group's continuations (not issued yet)");
      std::fprintf(stderr, "%swaiting for %s s %s (%s; timeout %s); %s\n", w.prefix.c_str(),
                   format_seconds(std::floor(waited * 10) / 10).c_str(), where.c_str(), format_bytes(w.bytes).c_str(),
                   timeout.c_str(),
                   late.empty() ? "every peer's heartbeat is current" : ("late heartbeats: " + late).c_str());
      std::fflush(stderr);
    }
    for (auto it = reported.begin(); it != reported.end();) {  // forget finished waits
      bool live = false;
      for (const PendingWait& w : pending_waits()) live = live || w.id == it->first;
      it = live ? std::next(it) : reported.erase(it);
    }
  }
}

namespace {

// Live heartbeats, finished at exit() when their groups were never destroyed.
std::mutex g_live_mu;
std::vector<std::shared_ptr<Heartbeat::State>>& live() {
  static auto* v = new std::vector<std::shared_ptr<Heartbeat::State>>();
  return *v;
}

void finish_live() {
  std::vector<std::shared_ptr<Heartbeat::State>> all;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    all.swap(live());
  }
  for (auto& s : all) s->finish();
}

}  // namespace

void Heartbeat::State::finish() {
  std::lock_guard<std::mutex> once(finish_mu);
  if (finished) return;
  finished = true;
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  beater.join();  // a store call lasts at most the heartbeat timeout
  monitor.join();
  if (!channel_closed) {
    try {
      cfg.channel->publish(BeatChannel::kDone);
    } catch (...) {  // rank 0 ended first, or MPI finalized: nobody left to tell
    }
  }
}

Heartbeat::Heartbeat(HeartbeatConfig config) : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.cfg = std::move(config);
  const auto now = Clock::now();
  s.seen.assign(s.cfg.world_size, now);
  s.last.assign(s.cfg.world_size, BeatChannel::kNone);
  s.done.assign(s.cfg.world_size, false);
  s.last_ok = now;
  s.beater = std::thread([st = state_] { st->beat_loop(); });
  s.monitor = std::thread([st = state_] { st->monitor_loop(); });
  static const int registered = std::atexit(finish_live);
  (void)registered;
  std::lock_guard<std::mutex> lock(g_live_mu);
  live().push_back(state_);
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    auto& v = live();
    v.erase(std::remove(v.begin(), v.end(), state_), v.end());
  }
  state_->finish();
}

Milliseconds resolve_heartbeat_timeout(Milliseconds option) {
  if (option.count() >= 0) return option;
  double s = launch_env::seconds(launch_env::kHeartbeatTimeout).value_or(30);
  if (s > 0 && s < 0.001) s = 0.001;
  return Milliseconds(static_cast<int64_t>(std::llround(s * 1000)));
}

double wait_report_interval_s() { return launch_env::seconds(launch_env::kWaitReportInterval).value_or(30); }

std::unique_ptr<BeatChannel> store_beat_channel(StorePtr store, int rank, std::string address) {
  return std::make_unique<StoreBeatChannel>(std::move(store), rank, std::move(address));
}

void end_rank(const std::string& message, int silent_rank, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  record_error(PeerFailed<Error>(message, silent_rank), code);  // TORCHELASTIC_ERROR_FILE, for the root cause
  std::fflush(stdout);
  std::fflush(stderr);
  linger_before_failed_exit();  // peers that lost the same rank report it too (DDP_EXIT_LINGER)
  ::_exit(code);
}

}  // namespace ddp::detail
