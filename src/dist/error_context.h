// Where an error happened, for the "[gloo] rank 2/4 all_reduce: " prefix of
// every message. For ddp's own code (backends, the front, DDP), not users.
#pragma once
#include <string>

#include "ddp/dist/errors.h"

namespace ddp {

// Where an error happened: backend, rank, world size, operation.
struct ErrorContext {
  std::string backend;
  int rank = 0;
  int size = 1;
  std::string op;
  // "[gloo] rank 2/4 all_reduce: "
  std::string prefix() const;
};

// Throws ddp::InvalidArgument with ctx's prefix.
[[noreturn]] void throw_invalid(const ErrorContext& ctx, const std::string& what);

}  // namespace ddp
