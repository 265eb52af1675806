// The collectives and DDP suites across processes: run under ddprun (gloo, mpi or nccl), each
// rank runs every case on the default group, on its device (ProcessGroup::device(): the rank's GPU for nccl). Exits
// non-zero if any case fails on this rank; ddprun then fails the whole run. A case still running after
// DDP_TEST_CASE_TIMEOUT seconds is named and ends its rank with 124 (support/case_deadline.h).
#include <gtest/gtest.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cstdio>

#include "support/case_deadline.h"
#include "support/collectives_suite.h"
#include "support/ddp_suite.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ddp::testing::watch_case_deadlines();
  ddp::GroupPtr group;
  try {
    group = ddp::init_process_group();
  } catch (const std::exception& e) {  // e.g. nccl without a GPU: said in one line, exit 1, not an abort
    std::fprintf(stderr, "suite_mp: %s\n", e.what());
    return 1;
  }
  std::string suite = "Suite_" + group->backend() + "_w" + std::to_string(group->size());
  at::set_num_threads(1);
  // The suites run on the group's device (a GPU for nccl) against float32 bounds: no TF32 in cuDNN's convolutions,
  // nor in cuBLAS's matrix products (off by default, unless TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 is set).
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  std::vector<ddp::testing::SuiteCase> cases = ddp::testing::collectives_suite();
  for (const auto& c : ddp::testing::ddp_suite()) cases.push_back(c);
  for (const auto& c : cases) {
    ::testing::RegisterTest(suite.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [group, run = c.run]() -> ::testing::Test* {
                              struct T : ::testing::Test {
                                ddp::GroupPtr g;
                                std::function<void(ddp::ProcessGroup&)> fn;
                                void TestBody() override { fn(*g); }
                              };
                              auto* t = new T;
                              t->g = group;
                              t->fn = run;
                              return t;
                            });
  }
  int rc = RUN_ALL_TESTS();
  group->barrier();
  ddp::destroy_process_group();
  return rc;
}
