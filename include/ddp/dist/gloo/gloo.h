// The gloo backend. Gloo through LibTorch's c10d ProcessGroupGloo (TCP; rendezvous over a store).
#pragma once
#include "ddp/dist/backend.h"

namespace ddp::gloo {

bool is_available();
GroupPtr create(const BackendOptions& opts);

}  // namespace ddp::gloo
