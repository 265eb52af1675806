#include "ddp/dist/backend_choice.h"

#include "ddp/dist/backend.h"
#include "dist/env.h"

namespace ddp {

BackendChoice choose_backend(const InitOptions& opts) {
  const auto r = detail::resolve_rendezvous(opts, launch_env::process(), is_backend_available("mpi"),
                                            is_backend_available("nccl"));
  return {r.backend, r.backend_reason, r.placement};
}

}  // namespace ddp
