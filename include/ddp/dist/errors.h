// Errors of process groups. Messages are prefixed with where it happened:
//   "[gloo] rank 2/4 all_reduce: ..."
// Bad arguments are ddp::InvalidArgument (ddp/errors.h); failures of
// communication (a peer died, a connection closed) are ddp::CommError; an
// operation that outlived its timeout is ddp::TimeoutError.
#pragma once
#include <string>

#include "ddp/errors.h"

namespace ddp {

// Communication with peers failed; the group is unusable afterwards.
class CommError : public Error {
 public:
  using Error::Error;
};

// An operation did not complete within its timeout.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// Where an error happened: backend, rank, world size, operation.
struct ErrorContext {
  std::string backend;
  int rank = 0;
  int size = 1;
  std::string op;
  // "[gloo] rank 2/4 all_reduce: "
  std::string prefix() const;
};

[[noreturn]] void throw_invalid(const ErrorContext& ctx, const std::string& what);

}  // namespace ddp
