// The DDP suite on ranks as threads: gloo, and nccl's contract over gloo (nccl_standin.h), at world sizes 1-4.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <tuple>

#include "support/ddp_suite.h"
#include "support/rank_threads.h"

namespace ddp::testing {
namespace {

using Param = std::tuple<int, size_t>;  // world, case index

class DdpThreads : public ::testing::TestWithParam<Param> {};

TEST_P(DdpThreads, Case) {
  at::set_num_threads(1);
  auto [world, index] = GetParam();
  run_ranks("gloo", world, ddp_suite()[index].run);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (size_t i = 0; i < ddp_suite().size(); ++i)
    for (int w = 1; w <= 4; ++w) out.emplace_back(w, i);
  return out;
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  return "w" + std::to_string(std::get<0>(info.param)) + "_" + ddp_suite()[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Gloo, DdpThreads, ::testing::ValuesIn(params()), name);

// nccl's contract: AVG, reduce_scatter and 16-bit sums native, no bitwise reductions, no call check.
class DdpThreadsNcclStandIn : public ::testing::TestWithParam<Param> {};

TEST_P(DdpThreadsNcclStandIn, Case) {
  at::set_num_threads(1);
  auto [world, index] = GetParam();
  run_ranks("nccl-standin", world, ddp_suite()[index].run);
}

INSTANTIATE_TEST_SUITE_P(NcclStandIn, DdpThreadsNcclStandIn, ::testing::ValuesIn(params()), name);

}  // namespace
}  // namespace ddp::testing
