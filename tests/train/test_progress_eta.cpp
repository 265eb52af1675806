// The live progress line's ETAs (epoch and run) on a fake clock, and the
// DDP_TTY hint by which ddprun's ranks draw it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "ddp/dist/errors.h"
#include "ddp/train/progress.h"

namespace ddp::train {
namespace {

// A clock that moves only when told.
struct FakeClock {
  Progress::Clock::time_point now{};
  void advance(double seconds) {
    now += std::chrono::duration_cast<Progress::Clock::duration>(std::chrono::duration<double>(seconds));
  }
  std::function<Progress::Clock::time_point()> fn() {
    return [this] { return now; };
  }
};

TEST(ProgressEta, Arithmetic) {
  EXPECT_EQ(Progress::eta(10.0, 5, 3), "0:06");       // 2 s per step, 3 left
  EXPECT_EQ(Progress::eta(7200.0, 1, 1), "2:00:00");  // 2 h per step
  EXPECT_EQ(Progress::eta(1.5, 3, 0), "0:00");
  EXPECT_EQ(Progress::eta(0.0, 0, 5), "-:--");   // nothing timed yet
  EXPECT_EQ(Progress::eta(3.0, 1, -4), "0:00");  // never negative
  EXPECT_EQ(Progress::eta(59.6, 1, 1), "1:00");  // rounded to the second
}

TEST(ProgressEta, EpochAndRunEtaOnTheLiveLine) {
  FakeClock clock;
  std::ostringstream out;
  Progress p(out, /*tty=*/true);
  p.set_clock(clock.fn());
  p.begin("epoch 2/3", 4, /*run_done=*/4, /*run_total=*/12);
  clock.advance(2.0);
  p.update(1, {{"loss", 0.5}, {"samples/s", 64}});
  // 2 s per step: 3 steps left in the epoch (6 s), 12 - 4 - 1 = 7 in the run (14 s).
  EXPECT_EQ(out.str(), "\repoch 2/3 [=====>              ] 1/4 loss 0.5 | 64 samples/s | eta 0:06, run 0:14\x1b[K");
  out.str("");
  clock.advance(1.0);  // 3 s for 2 steps: 1.5 s per step
  p.update(2, {{"loss", 0.25}});
  EXPECT_EQ(out.str(), "\repoch 2/3 [==========>         ] 2/4 loss 0.25 | eta 0:03, run 0:09\x1b[K");
  out.str("");
  clock.advance(0.05);  // within 100 ms of the last redraw: not drawn
  p.update(3, {{"loss", 0.2}});
  EXPECT_EQ(out.str(), "");
  clock.advance(60.0);
  p.update(4, {{"loss", 0.1}});
  // 63.05 s for 4 steps: 15.7625 s per step; the run has 12 - 4 - 4 = 4 left.
  EXPECT_EQ(out.str(), "\repoch 2/3 [====================] 4/4 loss 0.1 | eta 0:00, run 1:03\x1b[K");
  p.end("epoch 2/3 done");
}

TEST(ProgressEta, WithoutARunOnlyTheEpochEta) {
  FakeClock clock;
  std::ostringstream out;
  Progress p(out, true);
  p.set_clock(clock.fn());
  p.begin("e", 10);
  clock.advance(4.0);
  p.update(1, {});
  EXPECT_EQ(out.str(), "\re [==>                 ] 1/10 | eta 0:36\x1b[K");
}

TEST(ProgressEta, ResumedMidEpochTimesOnlyTheStepsRunHere) {
  FakeClock clock;
  std::ostringstream out;
  Progress p(out, true);
  p.set_clock(clock.fn());
  p.begin("epoch 1/2", 10, 0, 20);
  clock.advance(3.0);
  p.update(6, {});  // the first step after a resume at step 5: 3 s for 1 step, not for 6
  EXPECT_EQ(out.str(), "\repoch 1/2 [============>       ] 6/10 | eta 0:12, run 0:42\x1b[K");
}

TEST(ProgressEta, PlainLinesHaveNoEta) {
  FakeClock clock;
  std::ostringstream out;
  Progress p(out, /*tty=*/false, /*every=*/1);
  p.set_clock(clock.fn());
  p.begin("epoch 1/2", 2, 0, 4);
  clock.advance(1.0);
  p.update(1, {{"loss", 0.5}});
  EXPECT_EQ(out.str(), "epoch 1/2 step 1/2 loss 0.5\n");
}

TEST(ProgressEta, RunPositionMustFit) {
  std::ostringstream out;
  Progress p(out, true);
  EXPECT_THROW(p.begin("epoch 3/3", 4, 9, 12), InvalidArgument);  // 9 + 4 > 12
  EXPECT_THROW(p.begin("epoch 1/3", 4, -1, 12), InvalidArgument);
  EXPECT_NO_THROW(p.begin("epoch 3/3", 4, 8, 12));
}

TEST(ProgressEta, DdpTtyHintMakesStdoutLive) {
  // ctest's stdout is a pipe or a file: live only with the hint.
  ASSERT_EQ(::unsetenv("DDP_TTY"), 0);
  EXPECT_FALSE(Progress::live_stdout());
  ASSERT_EQ(::setenv("DDP_TTY", "1", 1), 0);
  EXPECT_TRUE(Progress::live_stdout());
  ASSERT_EQ(::setenv("DDP_TTY", "0", 1), 0);
  EXPECT_FALSE(Progress::live_stdout());
  ::unsetenv("DDP_TTY");
}

}  // namespace
}  // namespace ddp::train
