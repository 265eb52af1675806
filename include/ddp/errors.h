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

// What an error is when a rank stops because another rank failed (the ranks agreed on it): that rank's own
// error is the cause. record_error writes the rank, and ddprun's summary names that rank's error first.
class PeerFailure {
 public:
  explicit PeerFailure(int rank) : rank_(rank) {}
  virtual ~PeerFailure() = default;
  int failed_rank() const { return rank_; }

 private:
  int rank_;
};

// An Error or InvalidArgument (Base) that is a PeerFailure: `throw PeerFailed<Error>("rank 0 failed to ...", 0);`
template <class Base>
class PeerFailed : public Base, public PeerFailure {
 public:
  PeerFailed(const std::string& what, int rank) : Base(what), PeerFailure(rank) {}
};

}  // namespace ddp
