// The timeline recorder: per-thread event buffers, written as Chrome trace JSON.
#include "ddp/dist/timeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "dist/atomic_file.h"
#include "dist/timeline_device.h"
#include "dist/timeline_files.h"

namespace ddp::timeline {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

struct Event {
  std::string track, name, args;
  int64_t ts = 0, dur = 0;
};

// One per recording thread; the registry keeps it after the thread ends.
struct Buffer {
  std::mutex mu;
  std::vector<Event> events;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<Buffer>> buffers;
  std::string path;
  int rank = -1;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

Buffer& my_buffer() {
  thread_local std::shared_ptr<Buffer> mine;
  if (!mine) {
    mine = std::make_shared<Buffer>();
    mine->events.reserve(1024);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.buffers.push_back(mine);
  }
  return *mine;
}

int env_rank() {
  namespace le = launch_env;
  return le::first_valid_count({&le::kRank, &le::kOmpiRank, &le::kPmiRank}).value_or(0);
}

void flush_at_exit() {
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp: timeline: %s\n", e.what());
  }
}

// DDP_TIMELINE=FILE: on from load time.
const bool g_from_env = [] {
  if (auto path = launch_env::text(launch_env::kTimeline)) start(*path);
  return true;
}();

}  // namespace

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void complete(const std::string& track, const std::string& name, int64_t start_us, int64_t dur_us,
              std::string args_json) {
  if (!enabled()) return;
  Buffer& b = my_buffer();
  std::lock_guard<std::mutex> lock(b.mu);  // uncontended but for flush()
  b.events.push_back(Event{track, name, std::move(args_json), start_us, std::max<int64_t>(0, dur_us)});
}

void start(const std::string& path) {
  if (path.empty()) throw InvalidArgument("[timeline] the timeline file name is empty");
  Registry& r = registry();
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    first = r.path.empty();
    r.path = path;
  }
  if (first) std::atexit(flush_at_exit);
  detail::g_on.store(true, std::memory_order_relaxed);
}

void set_recording(bool on) {
  if (path().empty()) return;
  detail::g_on.store(on, std::memory_order_relaxed);
}

std::string path() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.path;
}

void set_rank(int rank) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.rank = rank;
}

std::string rank_file(const std::string& path, int rank) { return timeline_files::rank_file(path, rank); }

std::string flush() {
  if (enabled()) detail::settle_device_spans(/*wait=*/true);  // a GPU's spans, once it has run them
  Registry& r = registry();
  std::vector<Event> events;
  std::string path;
  int rank = 0;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.path.empty()) return "";
    path = r.path;
    rank = r.rank >= 0 ? r.rank : env_rank();
    for (auto& b : r.buffers) {
      std::lock_guard<std::mutex> block(b->mu);
      events.insert(events.end(), b->events.begin(), b->events.end());
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });
  // A trace thread per track, numbered in order of first use.
  std::map<std::string, int> tids;
  std::vector<std::string> tracks;
  for (const Event& e : events)
    if (tids.emplace(e.track, static_cast<int>(tids.size()) + 1).second) tracks.push_back(e.track);
  using nlohmann::json;
  std::ostringstream out;
  out << "{\"traceEvents\":[\n";
  out << json{{"ph", "M"},
              {"pid", rank},
              {"tid", 0},
              {"name", "process_name"},
              {"args", {{"name", "rank " + std::to_string(rank)}}}}
             .dump();
  out << ",\n"
      << json{{"ph", "M"}, {"pid", rank}, {"tid", 0}, {"name", "process_sort_index"}, {"args", {{"sort_index", rank}}}}
             .dump();
  for (const std::string& t : tracks) {
    const int tid = tids[t];
    out << ",\n"
        << json{{"ph", "M"}, {"pid", rank}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", t}}}}.dump();
    out << ",\n"
        << json{{"ph", "M"},
                {"pid", rank},
                {"tid", tid},
                {"name", "thread_sort_index"},
                {"args", {{"sort_index", tid}}}}
               .dump();
  }
  for (const Event& e : events) {
    out << ",\n{\"ph\":\"X\",\"pid\":" << rank << ",\"tid\":" << tids[e.track] << ",\"ts\":" << e.ts
        << ",\"dur\":" << e.dur << ",\"name\":" << json(e.name).dump() << ",\"cat\":" << json(e.track).dump()
        << ",\"args\":{" << e.args << "}}";
  }
  out << "\n],\"displayTimeUnit\":\"ms\"}\n";
  const std::string file = rank_file(path, rank);
  std::string error;
  try {
    ddp::detail::write_file_atomic(file, out.str());
  } catch (const Error& e) {
    error = std::string(e.what()) + ": check the directory of " + path;
  }
  if (!error.empty()) {  // said once: recording stops, the exit-time flush does nothing
    detail::g_on.store(false, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.path.clear();
    }
    throw Error("[timeline] rank " + std::to_string(rank) + ": " + error);
  }
  return file;
}

int merge(const std::string& path, int world) {
  std::string error;
  const int found = timeline_files::merge(path, world, &error);
  if (found < 0) throw Error("[timeline] " + error);
  return found;
}

}  // namespace ddp::timeline
