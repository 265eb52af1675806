// The main of every gtest binary. ctest runs a whole suite in one process (tests/discover_suites.cmake: one start of
// LibTorch instead of one per case), so what ctest did per case is done here:
//  - a deadline per case (DDP_TEST_CASE_TIMEOUT seconds, set by ctest): a case still running then is named and the
//    process ends with 124, as a hang, instead of the suite's whole budget running out unnamed;
//  - exit 77 (ctest's SKIP_RETURN_CODE) when a case skipped (GTEST_SKIP: no GPU, no mpirun) and none failed, so that a
//    suite is never reported passed for checks it did not run.
#include <gtest/gtest.h>

#include <cstdio>

#include "support/case_deadline.h"

namespace {

constexpr int kSkipped = 77;

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ddp::testing::watch_case_deadlines();
  int rc = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (rc == 0 && unit.skipped_test_count() > 0) {
    std::fprintf(stderr, "[ddp-test] %d of %d case(s) skipped (listed above): reported as skipped (exit %d)\n",
                 unit.skipped_test_count(), unit.test_to_run_count(), kSkipped);
    return kSkipped;
  }
  return rc;
}
