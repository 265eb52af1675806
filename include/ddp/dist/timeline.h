// A timeline of where time goes: Chrome trace-event JSON (Perfetto, chrome://tracing).
//
//   DDP_TIMELINE=/tmp/t.json ./train      // any program: on from the start
//   ddp::timeline::start("/tmp/t.json");  // or from code (ddp-train --timeline)
//   { ddp::timeline::Span s("compute", "forward"); model->forward(x); }
//   { ddp::timeline::DeviceSpan s("compute", "forward", device); ... }  // a GPU's own time too
//
// Each rank writes FILE with ".rank{N}" inserted before the extension
// (t.rank0.json) at exit or flush(); merge() (ddprun, ddp-train) joins them into
// FILE. Timestamps are wall-clock microseconds since the Unix epoch, so ranks on
// one host line up. Off: enabled() is one relaxed load and Span stores nothing.
#pragma once
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp::timeline {

namespace detail {
extern std::atomic<bool> g_on;
}

inline bool enabled() { return detail::g_on.load(std::memory_order_relaxed); }

// Wall clock, microseconds since the Unix epoch.
int64_t now_us();

// Records an "X" event on `track` (one trace thread per track name, in order of
// first use) from start_us lasting dur_us. args_json: the body of an object
// ("\"bytes\": 4096"), or empty. Does nothing when off.
void complete(const std::string& track, const std::string& name, int64_t start_us, int64_t dur_us,
              std::string args_json = {});

// Records [construction, destruction) when on at construction. Track and name
// must outlive the span (string literals).
class Span {
 public:
  Span(const char* track, const char* name) : track_(track), name_(name) {
    if (enabled()) start_ = now_us();
  }
  ~Span() { end(); }
  // Ends the span early (once).
  void end() {
    if (start_ >= 0) complete(track_, name_, start_, now_us() - start_);
    start_ = -1;
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* track_;
  const char* name_;
  int64_t start_ = -1;
};

// Records the work `device` runs between construction and destruction (or end()), when on at construction. On
// the CPU it is a Span on `track`. On a GPU the host only queues that work: a Span of the host on `track`, and the
// device's own interval on the track "<track> (cuda:N)", from CUDA events on its stream (dist/device_mark.h),
// written once the device has reached them (at a later span's end, or at flush()).
class DeviceSpan {
 public:
  DeviceSpan(const char* track, const char* name, const c10::Device& device);
  ~DeviceSpan();
  void end();
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

 private:
  struct Marks;
  const char* track_;
  const char* name_;
  std::unique_ptr<Marks> marks_;  // null when off
};

// Turns recording on, to write path's rank file at exit (and at flush()).
// Throws std::invalid_argument for an empty path. DDP_TIMELINE calls it at load.
void start(const std::string& path);
// After start(): pauses (false) or resumes (true) recording; ddp-bench's side-by-side
// of the same steps with and without it.
void set_recording(bool on);
// The path given to start() / DDP_TIMELINE; empty when off.
std::string path();
// This process's rank for pid and the file name. Default: RANK or
// OMPI_COMM_WORLD_RANK from the environment, else 0; init_process_group sets it.
void set_rank(int rank);
// "t.json", 3 -> "t.rank3.json"; "t" -> "t.rank3".
std::string rank_file(const std::string& path, int rank);
// Writes the events recorded so far (all threads) to rank_file(path(), rank),
// replacing it. Returns the file written, or empty when off. Throws ddp::Error
// when it cannot be written.
std::string flush();
// Joins rank_file(path, r) for r in [0, world) that exist into path; returns how
// many ranks were found. Events keep their pids (ranks).
int merge(const std::string& path, int world);

}  // namespace ddp::timeline
