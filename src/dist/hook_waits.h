// The check that nothing waits for communication inside autograd's gradient hooks (DDP's reducer, FSDP's
// backward). A wait there stalls backward; on CUDA, where autograd runs the hooks of one device on one thread
// shared by every rank thread of a process, it deadlocks them. As PyTorch's reducer, ddp launches every
// reduction from a hook asynchronously and waits once, at the end of backward.
//
// A HookScope marks the thread while a hook runs. With the check on (DDP_CHECK_HOOK_WAITS=1, or
// DDP_DEBUG=DETAIL; scripts/test.sh turns it on for every test), a Work::wait() there on an operation not yet
// complete throws ddp::Error naming the hook. The call check's own exchange (agreement.h), a debug aid that
// DDP_DEBUG=OFF removes, is exempt (AllowHookWait).
#pragma once

namespace ddp::detail {

class HookScope {
 public:
  // `hook`, the prefix of the error, names it with the rank ("[gloo] rank 1/2 DistributedDataParallel's gradient
  // hook: "); it must outlive the scope.
  explicit HookScope(const char* hook);
  ~HookScope();
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

 private:
  const char* previous_;
};

class AllowHookWait {
 public:
  AllowHookWait();
  ~AllowHookWait();
  AllowHookWait(const AllowHookWait&) = delete;
  AllowHookWait& operator=(const AllowHookWait&) = delete;

 private:
  const char* previous_;
};

bool hook_wait_check_enabled();
void set_hook_wait_check(bool on);  // overrides the environment (tests)
// True when the check is on and this thread runs a hook (outside AllowHookWait): a wait here must not block.
bool waits_checked_here();
[[noreturn]] void fail_wait_in_hook(const char* what);  // ddp::Error naming the hook

}  // namespace ddp::detail
