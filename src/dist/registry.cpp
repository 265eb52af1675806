// Backends by name: each is compiled in when its dependency was found.
#include <sstream>

#include "ddp/dist/backend.h"
#include "ddp/dist/errors.h"
#include "dist/backend_impl.h"
#include "dist/gloo/gloo.h"
#include "dist/local/local.h"
#include "dist/mpi/mpi.h"
#include "dist/nccl/nccl.h"

namespace ddp {
namespace {

struct Entry {
  const char* name;
  bool built;
  bool (*is_available)();
  std::unique_ptr<detail::Backend> (*create)(const BackendOptions&);
  const char* needs = "install its dependency and rebuild";  // what a build without it lacks
  const char* unusable = "";                                 // why a built one may not run
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> list = {
#ifdef DDP_HAVE_GLOO
      {"gloo", true, &gloo::is_available, &gloo::create},
#else
      {"gloo", false, nullptr, nullptr},
#endif
#ifdef DDP_HAVE_MPI
      {"mpi", true, &mpi::is_available, &mpi::create},
#else
      {"mpi", false, nullptr, nullptr},
#endif
#ifdef DDP_HAVE_NCCL
      {"nccl", true, &nccl::is_available, &nccl::create, "", "no GPU is visible to this process"},
#else
      {"nccl", false, nullptr, nullptr,
       "build it against a LibTorch with CUDA and NCCL (PyPI's torch wheel: DDP_TORCH=2 ./scripts/build.sh)"},
#endif
      {"local", true, &local::is_available, &local::create},
  };
  return list;
}

std::string join(const std::vector<std::string>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  return s.str();
}

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& e : entries()) out.push_back(e.name);
  return out;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
  for (const auto& e : entries())
    if (e.built && e.is_available()) out.push_back(e.name);
  return out;
}

bool is_backend_available(const std::string& name) {
  for (const auto& e : entries())
    if (name == e.name) return e.built && e.is_available();
  return false;
}

namespace detail {

std::unique_ptr<Backend> create_backend_impl(const std::string& name, const BackendOptions& opts) {
  for (const auto& e : entries()) {
    if (name != e.name) continue;
    if (!e.built)
      throw Error("backend '" + name + "' is not built into this ddp (available: " + join(available_backends()) +
                  "); " + e.needs);
    if (!e.is_available())
      throw Error("backend '" + name + "' is built but cannot run here (available: " + join(available_backends()) +
                  "): " + e.unusable);
    return e.create(opts);
  }
  throw InvalidArgument("unknown backend '" + name + "'; valid backends: " + join(backend_names()) + " (or auto)");
}

}  // namespace detail

GroupPtr create_backend(const std::string& name, const BackendOptions& opts) {
  return std::make_shared<ProcessGroup>(detail::create_backend_impl(name, opts), opts.timeout);
}

}  // namespace ddp
