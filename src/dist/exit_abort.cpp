#include "dist/exit_abort.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <set>

namespace ddp::detail {
namespace {

// The armed entries. Leaked on purpose: the handler may run while static destructors are still ahead.
struct Registry {
  std::mutex mu;
  std::set<ExitAbort*> live;
  bool ran = false;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

void at_exit() { run_exit_aborts(); }

}  // namespace

void ExitAbort::arm() {
  if (armed_.load() || armed_.exchange(true)) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.insert(this);
  // One registration per entry: the latest runs first, so an entry armed after its runtime started is aborted
  // before that runtime's handler even where an earlier entry was armed before it; the later ones find it done.
  if (!r.ran) std::atexit(at_exit);
}

ExitAbort::~ExitAbort() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);  // held by run_exit_aborts while it runs the entries
  r.live.erase(this);
}

void run_exit_aborts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ran) return;
  r.ran = true;
  for (ExitAbort* e : r.live) {
    try {
      e->abort_();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "ddp: at exit, letting a process group go failed: %s\n", ex.what());
    } catch (...) {
      std::fprintf(stderr, "ddp: at exit, letting a process group go failed\n");
    }
  }
  r.live.clear();
}

}  // namespace ddp::detail
