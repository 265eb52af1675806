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

}  // namespace ddp
