// The local backend. A world of one process: every collective is a no-op (or a local copy).
#pragma once
#include <memory>

#include "dist/backend_impl.h"

namespace ddp::local {

bool is_available();
std::unique_ptr<detail::Backend> create(const BackendOptions& opts);

}  // namespace ddp::local
