// Cases for gtest_main_test.sh, which runs them by filter: what the tests' main (support/gtest_main.cpp) does with a
// case that passes, fails, skips or hangs. Not a suite of the build's own: it is never registered with ctest.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace {
void sleep_for(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }
}  // namespace

TEST(Probe, PassesAfterAWhile) {
  sleep_for(1.2);
  EXPECT_TRUE(true);
}
TEST(Probe, PassesAfterAWhileAgain) {
  sleep_for(1.2);
  EXPECT_TRUE(true);
}
TEST(Probe, Fails) { EXPECT_EQ(1, 2) << "the probe's deliberate failure"; }
TEST(Probe, Skips) { GTEST_SKIP() << "the probe's deliberate skip"; }
TEST(Probe, Hangs) {
  for (;;) sleep_for(1);
}
