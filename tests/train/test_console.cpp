// The Trainer's one console sink: rank 0's lines, warnings, a rank's own news,
// and lines above a live progress line.
#include <gtest/gtest.h>

#include <sstream>

#include "ddp/train/progress.h"
#include "train/console.h"
#include "train/train_logs.h"

namespace ddp::train::detail {
namespace {

TEST(Console, RankZeroSpeaksOtherRanksOnlyOfThemselves) {
  std::ostringstream out, err;
  Console leader(out, err);
  leader.line("resumed from c.pt at epoch 2, step 10");
  leader.warning("checkpoint c.pt is unusable");
  leader.rank_message("rank 0: cannot read c.pt");
  EXPECT_EQ(out.str(), "resumed from c.pt at epoch 2, step 10\n");
  EXPECT_EQ(err.str(), "ddp-train: warning: checkpoint c.pt is unusable\nddp-train: rank 0: cannot read c.pt\n");

  std::ostringstream out1, err1;
  Console other(out1, err1);
  other.set_leader(false);
  other.line("resumed");
  other.warning("unusable");
  other.rank_message("rank 1: cannot read c.pt");
  EXPECT_EQ(out1.str(), "");
  EXPECT_EQ(err1.str(), "ddp-train: rank 1: cannot read c.pt\n");
}

// On a terminal the progress line is redrawn in place; a line printed meanwhile starts on a line of its own.
TEST(Console, LinesGoAboveALiveProgressLine) {
  std::ostringstream out, err;
  Console console(out, err);
  Progress progress(out, /*tty=*/true, 1);
  console.set_progress(&progress);
  progress.begin("epoch 1/1", 4, 0, 4);
  progress.update(1, {{"loss", 0.5}});
  console.line("eval: acc1 50.00%");
  const std::string text = out.str();
  const auto at = text.find("eval: acc1 50.00%\n");
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_GT(at, 0u) << text;
  EXPECT_EQ(text[at - 1], '\n') << text;  // not glued to the progress line
  EXPECT_NE(text.find("epoch 1/1"), std::string::npos) << text;
}

// TrainLogs' own messages (epoch summaries, notes) go through its console.
TEST(Console, TrainLogsSpeakThroughIt) {
  TrainLogs logs;
  logs.console().set_leader(false);
  logs.open("unused", /*leader=*/false, /*progress=*/false);
  testing::internal::CaptureStdout();
  logs.note("not rank 0's");
  logs.end_epoch("nor this");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace ddp::train::detail
