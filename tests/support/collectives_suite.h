// The backend-agnostic collectives suite. Every case runs on every rank of a
// group and checks exact, closed-form results (for input rank+1: SUM =
// W(W+1)/2, PRODUCT = W!, MIN = 1, MAX = W, AVG = (W+1)/2). Cases use EXPECT
// only, never ASSERT: a rank that returned early would desynchronise the
// collectives of the others.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ddp/dist.h"

namespace ddp::testing {

struct SuiteCase {
  std::string name;
  std::function<void(ProcessGroup&)> run;
};

const std::vector<SuiteCase>& collectives_suite();

}  // namespace ddp::testing
