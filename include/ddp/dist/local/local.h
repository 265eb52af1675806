// The local backend. A world of one process: every collective is a no-op (or a local copy).
#pragma once
#include "ddp/dist/backend.h"

namespace ddp::local {

bool is_available();
GroupPtr create(const BackendOptions& opts);

}  // namespace ddp::local
