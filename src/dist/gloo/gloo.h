// The gloo backend. Gloo through LibTorch's c10d ProcessGroupGloo (TCP; rendezvous over a store).
#pragma once
#include <memory>

#include "dist/backend_impl.h"

namespace ddp::gloo {

bool is_available();
std::unique_ptr<detail::Backend> create(const BackendOptions& opts);

}  // namespace ddp::gloo
