// The __cxa_throw wrapper and the ring of recent throws (see throw_trace.h).
#include "throw_trace.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <typeinfo>

namespace ddp::detail {
namespace {

constexpr int kFrames = 48, kRing = 16;

struct Throw {
  const void* object = nullptr;  // the exception object (its most derived address)
  int size = 0;
  void* frames[kFrames];
};

std::mutex g_mutex;
std::array<Throw, kRing> g_ring;
int g_next = 0;

// std::__cxx11::basic_string<char, ...> as std::string: names stay readable.
std::string shorten(std::string name) {
  static const std::string kLong = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >";
  for (size_t at = name.find(kLong); at != std::string::npos; at = name.find(kLong, at))
    name.replace(at, kLong.size(), "std::string");
  return name;
}

// "name+0xoff (library)" for one return address; "?+0xoff (library)" where the
// library exports no name for it (a local or .cold function: addr2line -f -C -e
// LIBRARY 0xoff names it).
std::string describe(void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", address);
    return buf;
  }
  std::string library = info.dli_fname ? info.dli_fname : "?";
  if (auto slash = library.rfind('/'); slash != std::string::npos) library = library.substr(slash + 1);
  std::string name = "?";
  uintptr_t offset = reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (info.dli_sname != nullptr) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status),
                                                     std::free);
    name = shorten(status == 0 && demangled ? demangled.get() : info.dli_sname);
    offset = reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_saddr);
  }
  char off[32];
  std::snprintf(off, sizeof off, "+0x%zx", static_cast<size_t>(offset));
  return name + off + " (" + library + ")";
}

}  // namespace

void remember_throw(const void* object) {
  Throw t;
  t.object = object;
  t.size = ::backtrace(t.frames, kFrames);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ring[g_next] = t;
  g_next = (g_next + 1) % kRing;
}

std::vector<std::string> throw_backtrace(const std::exception& e) {
  const void* object = dynamic_cast<const void*>(&e);
  Throw found;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (int i = 1; i <= kRing && found.object == nullptr; ++i) {  // newest first
      const Throw& t = g_ring[(g_next - i + kRing) % kRing];
      if (t.object == object) found = t;
    }
  }
  std::vector<std::string> frames;
  // Frame 0 is remember_throw() itself, frame 1 the wrapper: the throw site is frame 2.
  for (int i = 2; i < found.size; ++i) frames.push_back(describe(found.frames[i]));
  return frames;
}

}  // namespace ddp::detail
