// The progress line: exact plain lines, the terminal bar's redraws, number
// and duration formats, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <regex>
#include <sstream>
#include <thread>

#include "ddp/dist/errors.h"
#include "ddp/train/progress.h"

namespace ddp::train {
namespace {

using Fields = std::vector<std::pair<std::string, double>>;

Fields fields_at(int64_t step) {
  return {{"loss", 1.0 / static_cast<double>(step)}, {"lr", 0.01}, {"samples/s", 1234.4 + step}};
}

TEST(Progress, PlainLinesEveryNStepsAndOnTheLast) {
  std::ostringstream out;
  Progress p(out, /*tty=*/false, /*every=*/2);
  p.begin("epoch 3/10", 5);
  for (int64_t s = 1; s <= 5; ++s) p.update(s, fields_at(s));
  p.end("epoch 3/10: val loss 0.3811");
  EXPECT_EQ(out.str(),
            "epoch 3/10 step 2/5 loss 0.5 lr 0.01 | 1236 samples/s\n"
            "epoch 3/10 step 4/5 loss 0.25 lr 0.01 | 1238 samples/s\n"
            "epoch 3/10 step 5/5 loss 0.2 lr 0.01 | 1239 samples/s\n"
            "epoch 3/10: val loss 0.3811\n");
}

TEST(Progress, PlainEndPrintsAStepThatWasSkipped) {
  std::ostringstream out;
  Progress p(out, false, 2);
  p.begin("epoch 1/1", 5);
  for (int64_t s = 1; s <= 3; ++s) p.update(s, {{"loss", 0.4213}});
  p.end();  // stopped early at step 3
  p.begin("epoch 2/2", 2);
  p.update(2, {});
  p.end();
  EXPECT_EQ(out.str(),
            "epoch 1/1 step 2/5 loss 0.4213\n"
            "epoch 1/1 step 3/5 loss 0.4213\n"
            "epoch 2/2 step 2/2\n");
}

TEST(Progress, TerminalBarRedrawsInPlace) {
  std::ostringstream out;
  Progress p(out, /*tty=*/true);
  p.begin("epoch 3/10", 4);
  for (int64_t s = 1; s <= 4; ++s) p.update(s, fields_at(s));
  p.end("done");
  const std::string text = out.str();
  // Fast updates: the first and the last step are drawn, the others may be skipped.
  long redraws = std::count(text.begin(), text.end(), '\r');
  EXPECT_GE(redraws, 2);
  EXPECT_LE(redraws, 4);
  EXPECT_EQ(text.rfind("\repoch 3/10 [=====>              ] 1/4 loss 1 lr 0.01 | 1235 samples/s | eta ", 0), 0u)
      << text;
  EXPECT_NE(text.find("\repoch 3/10 [====================] 4/4 loss 0.25 lr 0.01 | 1238 samples/s | eta 0:00\x1b[K\n"
                      "done\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.size() - text.rfind("done\n"), 5u);  // ends with the summary line
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\| eta \d+:\d\d\x1b\[K)")));
}

TEST(Progress, TerminalBarAtMostTenTimesASecond) {
  std::ostringstream out;
  Progress p(out, true);
  p.begin("e", 200);
  auto start = std::chrono::steady_clock::now();
  for (int64_t s = 1; s <= 200; ++s) {
    p.update(s, {{"loss", 0.5}});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  p.end();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = out.str();
  long redraws = std::count(text.begin(), text.end(), '\r');
  EXPECT_GE(redraws, 2);
  EXPECT_LE(redraws, static_cast<long>(seconds * 10) + 2) << seconds << " s";
  EXPECT_EQ(text.back(), '\n');
}

TEST(Progress, TerminalBarDrawsSlowStepsAndTheLatestStepAtEnd) {
  std::ostringstream out;
  Progress p(out, true);
  p.begin("epoch 1/1", 10);
  for (int64_t s = 1; s <= 3; ++s) {
    p.update(s, {});
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  p.update(4, {});  // within 100 ms of step 3's draw? no: 120 ms passed, so drawn
  p.update(5, {});  // right after step 4: skipped, then drawn by end()
  p.end();
  const std::string text = out.str();
  for (int s = 1; s <= 5; ++s)
    EXPECT_NE(text.find("] " + std::to_string(s) + "/10 | eta"), std::string::npos) << "step " << s << ": " << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 5);
  EXPECT_NE(text.find("[==========>         ] 5/10"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(Progress, NumberAndDurationFormats) {
  EXPECT_EQ(Progress::format_number(0.4213), "0.4213");
  EXPECT_EQ(Progress::format_number(0.42134), "0.4213");
  EXPECT_EQ(Progress::format_number(-0.42136), "-0.4214");
  EXPECT_EQ(Progress::format_number(0.01), "0.01");
  EXPECT_EQ(Progress::format_number(1234.4), "1234");
  EXPECT_EQ(Progress::format_number(9999.7), "10000");
  EXPECT_EQ(Progress::format_number(123456.7), "123457");
  EXPECT_EQ(Progress::format_number(2.5e9), "2.5e+09");
  EXPECT_EQ(Progress::format_number(1e-5), "1e-05");
  EXPECT_EQ(Progress::format_number(0), "0");
  EXPECT_EQ(Progress::format_number(std::nan("")), "nan");
  EXPECT_EQ(Progress::format_duration(12.4), "0:12");
  EXPECT_EQ(Progress::format_duration(75), "1:15");
  EXPECT_EQ(Progress::format_duration(3725), "1:02:05");
  EXPECT_EQ(Progress::format_duration(-3), "0:00");
}

TEST(Progress, BadArguments) {
  std::ostringstream out;
  EXPECT_THROW(Progress(out, false, 0), ddp::InvalidArgument);
  Progress p(out, false, 1);
  EXPECT_THROW(p.update(1, {}), ddp::InvalidArgument);  // before begin
  EXPECT_THROW(p.end(), ddp::InvalidArgument);
  EXPECT_THROW(p.begin("epoch", 0), ddp::InvalidArgument);
  p.begin("epoch 1/1", 3);
  try {
    p.update(4, {});
    ADD_FAILURE() << "step past the end accepted";
  } catch (const ddp::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("step 4 of \"epoch 1/1\" is outside [1, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.update(0, {}), ddp::InvalidArgument);
  EXPECT_EQ(out.str(), "");
}

TEST(Progress, DefaultsToPlainWhenNotATerminal) {
  std::ostringstream out;
  EXPECT_FALSE(Progress::is_terminal(out));
  Progress p(out);  // not std::cout: plain, every 50
  p.begin("e", 120);
  for (int64_t s = 1; s <= 120; ++s) p.update(s, {});
  p.end();
  EXPECT_EQ(out.str(), "e step 50/120\ne step 100/120\ne step 120/120\n");
}

}  // namespace
}  // namespace ddp::train
