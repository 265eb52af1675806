// The errors every layer of ddp throws. Messages say where it happened, e.g.
//   "[gloo] rank 2/4 all_reduce: ..."   "ddp-train: --lr must be positive"
// Bad arguments are std::invalid_argument (via ddp::InvalidArgument); any other
// failure is a ddp::Error (communication failures: ddp/dist/errors.h).
#pragma once
#include <stdexcept>
#include <string>

namespace ddp {

// Any runtime failure of ddp that is not a bad argument.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something invalid: a rank out of range, mismatched sizes...
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace ddp
