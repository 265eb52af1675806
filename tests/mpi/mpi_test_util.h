// Shared by the mpi backend tests: the world group every test uses, and checks
// that only EXPECT (never return early: every rank must make the same
// collective calls in the same order).
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddp/ddp.h"

namespace ddp::mpitest {

// The group over all ranks, created by main() before the tests run.
ProcessGroup& world();
GroupPtr world_ptr();

inline int R() { return world().rank(); }
inline int W() { return world().size(); }

const std::vector<at::ScalarType>& all_dtypes();
bool is_float(at::ScalarType t);

// "rank 1/4 <what>", for failure messages.
std::string where(const ProcessGroup& g, const std::string& what);

// Compares as float64, element by element; reports the first mismatch.
void expect_values(const at::Tensor& actual, const at::Tensor& expected, const std::string& what);

// 1 + i % 5: distinct enough to catch misplaced elements, exact in every dtype.
at::Tensor pattern(int64_t n);

// The "[mpi] rank r/W op: " prefix for this rank in group g.
std::string prefix(const ProcessGroup& g, const std::string& op);

// Runs fn, expecting std::invalid_argument whose message starts with the
// prefix for `op` and mentions `needle`.
template <typename Fn>
void expect_invalid(ProcessGroup& g, const std::string& op, const std::string& needle, Fn&& fn) {
  const std::string pre = prefix(g, op);
  try {
    fn();
    ADD_FAILURE() << where(g, op) << ": expected std::invalid_argument mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(pre, 0), 0u) << "'" << msg << "' should start with '" << pre << "'";
    EXPECT_NE(msg.find(needle), std::string::npos) << "'" << msg << "' should mention '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << where(g, op) << ": expected std::invalid_argument, got " << e.what();
  }
}

}  // namespace ddp::mpitest
