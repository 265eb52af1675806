// Where an exception was thrown, for the error file's "backtrace": every
// throw in the process (ours, LibTorch's, the standard library's) records its
// call stack, as folly's exception tracer does, by wrapping __cxa_throw; the
// handler that catches it at the top of main asks for the stack of that
// exception object. Only return addresses are kept at the throw (a few
// microseconds); names are looked up when asked.
#pragma once
#include <exception>
#include <string>
#include <vector>

namespace ddp::detail {

// The frames (innermost first: "function+0x12 (libfoo.so)") where `e` was
// thrown; empty when it was not recorded (thrown long ago: only the last 16
// throws of the process are kept).
std::vector<std::string> throw_backtrace(const std::exception& e);

// Records the current call stack for the exception object `object` (the
// __cxa_throw wrapper in throw_hook.cpp calls it on every throw).
__attribute__((noinline)) void remember_throw(const void* object);

}  // namespace ddp::detail
