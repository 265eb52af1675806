#include "dist/hook_waits.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "ddp/dist/errors.h"
#include "ddp/dist/launch_env.h"
#include "dist/agreement.h"

namespace ddp::detail {
namespace {

thread_local const char* current_hook = nullptr;

bool from_environment() {
  if (auto value = launch_env::choice(launch_env::kCheckHookWaits)) return *value == "1";
  return default_call_check(true) == CallCheck::kDetail;  // DDP_DEBUG (or TORCH_DISTRIBUTED_DEBUG) = DETAIL, any case
}

std::atomic<int>& state() {  // -1: not read yet
  static std::atomic<int> s{-1};
  return s;
}

}  // namespace

HookScope::HookScope(const char* hook) : previous_(current_hook) { current_hook = hook; }
HookScope::~HookScope() { current_hook = previous_; }

AllowHookWait::AllowHookWait() : previous_(current_hook) { current_hook = nullptr; }
AllowHookWait::~AllowHookWait() { current_hook = previous_; }

bool hook_wait_check_enabled() {
  int s = state().load(std::memory_order_relaxed);
  if (s < 0) {
    s = from_environment() ? 1 : 0;
    state().store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

void set_hook_wait_check(bool on) { state().store(on ? 1 : 0, std::memory_order_relaxed); }

bool waits_checked_here() { return current_hook != nullptr && hook_wait_check_enabled(); }

void fail_wait_in_hook(const char* what) {
  throw Error(std::string(current_hook ? current_hook : "a gradient hook: ") + what +
              " would block here: nothing may wait for communication during backward (it stalls backward, and "
              "deadlocks ranks whose hooks share one autograd thread, as on a GPU). Launch it asynchronously "
              "(async_op = true, or return the Work from a comm hook); DDP waits for every reduction at the end of "
              "backward. (DDP_CHECK_HOOK_WAITS=1 makes this check.)");
}

}  // namespace ddp::detail
