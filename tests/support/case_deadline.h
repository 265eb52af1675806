// A deadline per gtest case: with DDP_TEST_CASE_TIMEOUT=S set (ctest sets it, as do scripts/device-check.sh and
// anyone running a suite by hand), a case still running after S seconds is named on stderr and the process ends
// with 124, as a hang, instead of the whole run's limit running out unnamed. S not a positive number: exit 2.
#pragma once

namespace ddp::testing {

// Call after ::testing::InitGoogleTest; does nothing where DDP_TEST_CASE_TIMEOUT is unset or empty.
void watch_case_deadlines();

}  // namespace ddp::testing
