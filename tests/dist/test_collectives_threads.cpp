// The collectives suite on ranks as threads: gloo and nccl's contract over gloo (nccl_standin.h) at world sizes 1-4,
// local at 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "support/collectives_suite.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

using Param = std::tuple<std::string, int, size_t>;  // backend, world, case index

class CollectivesThreads : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesThreads, Case) {
  auto [backend, world, index] = GetParam();
  const auto& c = collectives_suite()[index];
  run_ranks(backend, world, c.run);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (size_t i = 0; i < collectives_suite().size(); ++i) {
    out.emplace_back("local", 1, i);
    if (is_backend_available("gloo"))
      for (const char* b : {"gloo", "nccl-standin"})
        for (int w = 1; w <= 4; ++w) out.emplace_back(b, w, i);
  }
  return out;
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  auto [backend, world, index] = info.param;
  std::string b = backend;
  std::replace(b.begin(), b.end(), '-', '_');
  return b + "_w" + std::to_string(world) + "_" + collectives_suite()[index].name;
}

INSTANTIATE_TEST_SUITE_P(Suite, CollectivesThreads, ::testing::ValuesIn(params()), name);

}  // namespace
}  // namespace ddp::testing
