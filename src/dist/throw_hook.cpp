// The __cxa_throw wrapper (see throw_trace.h). Its own file, compiled without
// the precompiled header: the C++ runtime's headers declare __cxa_throw in two
// incompatible ways, and this definition must meet neither.
#include <dlfcn.h>

#include <cstdlib>
#include <typeinfo>

namespace ddp::detail {
void remember_throw(const void* object);
}

// Every throw comes here first (libddp_dist precedes libstdc++ in the symbol
// lookup order), records where it was, and goes on to the runtime's __cxa_throw.
extern "C" [[noreturn]] void __cxa_throw(void* object, std::type_info* type, void (*destroy)(void*)) {
  using Real = void (*)(void*, std::type_info*, void (*)(void*));
  static Real real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "__cxa_throw"));
  ddp::detail::remember_throw(object);
  real(object, type, destroy);
  std::abort();  // not reached: the real __cxa_throw does not return
}
