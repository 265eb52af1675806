// Checks a merged ddp-train timeline (Chrome trace JSON):
//   timeline_check FILE WORLD STEPS GRAD_BYTES
// every rank present and named; per rank STEPS forward, backward and optimizer
// events in that order; bucket reductions inside backward whose bytes sum to
// STEPS * GRAD_BYTES; evaluation and checkpoint events; well-formed X events
// that nest or follow each other on every track.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

int failures = 0;
#define CHECK(cond, ...)                 \
  do {                                   \
    if (!(cond)) {                       \
      std::printf("FAIL: " __VA_ARGS__); \
      std::printf("\n");                 \
      ++failures;                        \
    }                                    \
  } while (0)

struct Ev {
  std::string name, track;
  int64_t ts, dur;
  json args;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: timeline_check FILE WORLD STEPS GRAD_BYTES\n");
    return 2;
  }
  const int world = std::atoi(argv[2]);
  const int64_t steps = std::atoll(argv[3]), grad_bytes = std::atoll(argv[4]);
  json trace;
  std::ifstream(argv[1]) >> trace;
  std::map<int, std::string> process;                  // pid -> name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> track
  std::map<int, std::map<int, std::vector<Ev>>> by;    // pid -> tid -> events
  for (const json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    const int pid = e.at("pid"), tid = e.at("tid");
    if (ph == "M") {
      if (e.at("name") == "process_name") process[pid] = e.at("args").at("name");
      if (e.at("name") == "thread_name") threads[{pid, tid}] = e.at("args").at("name");
      continue;
    }
    CHECK(ph == "X", "event phase %s, expected X or M", ph.c_str());
    const int64_t ts = e.at("ts"), dur = e.at("dur");
    CHECK(dur >= 0, "negative dur %lld", (long long)dur);
    CHECK(ts > 1500000000LL * 1000000, "ts %lld is not wall-clock microseconds since the epoch", (long long)ts);
    by[pid][tid].push_back({e.at("name"), e.at("cat"), ts, dur, e.value("args", json::object())});
  }
  CHECK(static_cast<int>(process.size()) == world, "%zu processes named, expected %d", process.size(), world);
  for (int r = 0; r < world; ++r) {
    CHECK(process[r] == "rank " + std::to_string(r), "pid %d is named '%s'", r, process[r].c_str());
    std::map<std::string, std::vector<Ev>> named;
    int64_t bucket_bytes = 0;
    size_t bucket_events = 0;
    for (auto& [tid, evs] : by[r]) {
      const bool named_thread = threads.count(std::make_pair(r, tid)) == 1;
      const std::string thread = threads[std::make_pair(r, tid)];
      CHECK(named_thread, "rank %d tid %d has no thread_name", r, tid);
      std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.ts < b.ts; });
      // On one track, an event either ends before the next starts or holds it whole.
      for (size_t i = 0; i + 1 < evs.size(); ++i) {
        const Ev &a = evs[i], &b = evs[i + 1];
        const bool disjoint = b.ts >= a.ts + a.dur, nested = b.ts + b.dur <= a.ts + a.dur;
        CHECK(disjoint || nested, "rank %d track %s: %s [%lld +%lld] and %s [%lld +%lld] overlap", r, a.track.c_str(),
              a.name.c_str(), (long long)a.ts, (long long)a.dur, b.name.c_str(), (long long)b.ts, (long long)b.dur);
      }
      for (const Ev& e : evs) {
        CHECK(thread == e.track, "rank %d: event %s on track %s of thread %s", r, e.name.c_str(), e.track.c_str(),
              thread.c_str());
        if (e.track.find(" (") == std::string::npos) named[e.name].push_back(e);  // a GPU's own track: its twin
        if (e.track.rfind("bucket ", 0) == 0) {
          ++bucket_events;
          bucket_bytes += e.args.at("bytes").get<int64_t>();
          CHECK(e.args.at("hook") == "allreduce", "rank %d: bucket hook %s", r, e.args.at("hook").dump().c_str());
          CHECK("bucket " + std::to_string(e.args.at("bucket").get<int>()) == e.track, "rank %d: bucket index %s on %s",
                r, e.args.at("bucket").dump().c_str(), e.track.c_str());
        }
      }
    }
    auto& fwd = named["forward"];
    auto& bwd = named["backward"];
    auto& opt = named["optimizer step"];
    CHECK(static_cast<int64_t>(fwd.size()) == steps, "rank %d: %zu forward events, expected %lld", r, fwd.size(),
          (long long)steps);
    CHECK(static_cast<int64_t>(bwd.size()) == steps, "rank %d: %zu backward events, expected %lld", r, bwd.size(),
          (long long)steps);
    CHECK(static_cast<int64_t>(opt.size()) == steps, "rank %d: %zu optimizer events, expected %lld", r, opt.size(),
          (long long)steps);
    CHECK(static_cast<int64_t>(named["data wait"].size()) >= steps, "rank %d: %zu data waits", r,
          named["data wait"].size());
    CHECK(!named["evaluation"].empty(), "rank %d: no evaluation event", r);
    CHECK(!named["checkpoint"].empty(), "rank %d: no checkpoint event", r);
    for (size_t i = 0; i < std::min({fwd.size(), bwd.size(), opt.size()}); ++i) {
      CHECK(fwd[i].ts + fwd[i].dur <= bwd[i].ts && bwd[i].ts + bwd[i].dur <= opt[i].ts,
            "rank %d step %zu: forward, backward, optimizer out of order", r, i + 1);
      if (i + 1 < fwd.size())
        CHECK(opt[i].ts + opt[i].dur <= fwd[i + 1].ts, "rank %d step %zu: optimizer after the next forward", r, i + 1);
    }
    // Each bucket is launched during a backward pass (its gradients are ready then).
    for (auto& [name, evs] : named) {
      if (name.rfind("reduce bucket ", 0) != 0) continue;
      for (const Ev& b : evs) {
        const bool inside =
            std::any_of(bwd.begin(), bwd.end(), [&](const Ev& w) { return b.ts >= w.ts && b.ts <= w.ts + w.dur; });
        CHECK(inside, "rank %d: %s at %lld starts outside every backward", r, name.c_str(), (long long)b.ts);
      }
    }
    CHECK(bucket_bytes == steps * grad_bytes, "rank %d: %zu bucket events carry %lld bytes, expected %lld steps x %lld",
          r, bucket_events, (long long)bucket_bytes, (long long)steps, (long long)grad_bytes);
  }
  if (failures == 0)
    std::printf("timeline ok: %d ranks, %lld steps each with forward, backward, optimizer; buckets %lld bytes/step\n",
                world, (long long)steps, (long long)grad_bytes);
  return failures == 0 ? 0 : 1;
}
