// The run report page: the data it embeds (every metrics.jsonl line, the
// checkpoint list), escaping, Chart.js inline, atomic writes, errors; and the
// per-rank numbers of the trainer's log points. The page rendered in a real
// browser: report_browser_test.sh.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "ddp/dist/errors.h"
#include "ddp/train/metrics_log.h"
#include "ddp/train/report.h"
#include "test_files.h"
#include "train/rank_metrics.h"

namespace ddp::train {
namespace {

using test::TempDir;
using json = nlohmann::json;

// The JSON between <script type="application/json" id="runs"> and its </script>.
json embedded_runs(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"runs\">";
  const size_t at = page.find(open);
  EXPECT_NE(at, std::string::npos);
  const size_t from = at + open.size(), to = page.find("</script>", from);
  return json::parse(page.substr(from, to - from));
}

void make_run(const std::string& dir, int epochs) {
  JsonlWriter log(dir + "/metrics.jsonl");
  log.write({{"kind", "start"},
             {"recipe", "fashion-mnist"},
             {"world", int64_t{2}},
             {"backend", "gloo"},
             {"config", "recipe = \"fashion-mnist\"\nnote = \"</script><b>\"\n"}});
  for (int e = 1; e <= epochs; ++e) {
    log.write({{"kind", "train"},
               {"step", int64_t(10 * e)},
               {"Loss/train", 1.0 / e},
               {"lr", 0.1},
               {"samples_per_s/rank0", 100.0},
               {"samples_per_s/rank1", 50.0}});
    log.write({{"kind", "epoch"},
               {"step", int64_t(10 * e)},
               {"Loss/val", 0.5 / e},
               {"acc1/val", 0.8},
               {"acc5/val", 0.99},
               {"epoch", double(e)}});
  }
  log.write({{"kind", "end"}, {"status", "finished"}, {"message", ""}});
}

TEST(Report, EmbedsEveryLineChartJsAndNoPlaceholder) {
  TempDir d;
  make_run(d / "run", 2);
  std::filesystem::create_directories(d / "run/checkpoints");
  test::write_file(d / "run/checkpoints/checkpoint-e0002-s00000020.pt", "22222");
  test::write_file(d / "run/checkpoints/checkpoint-e0001-s00000010.pt", "1");
  test::write_file(d / "run/checkpoints/latest", "checkpoint-e0002-s00000020.pt\n");
  test::write_file(d / "run/checkpoints/notes.txt", "not a checkpoint");
  const std::string page = render_report({d / "run"});
  EXPECT_NE(page.find("Chart.js v3.9"), std::string::npos) << "Debian's Chart.js is not embedded";
  EXPECT_EQ(page.find("@@DATA@@"), std::string::npos);
  EXPECT_EQ(page.find("@@CHART_JS@@"), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos) << "the page must not load anything";
  const json runs = embedded_runs(page);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["name"], "run");
  EXPECT_EQ(runs[0]["lines"].size(), 6u);  // start, 2 x (train, epoch), end
  EXPECT_EQ(runs[0]["lines"][2]["kind"], "epoch");
  EXPECT_EQ(runs[0]["lines"][2]["Loss/val"], 0.5);
  EXPECT_EQ(runs[0]["lines"][0]["config"], "recipe = \"fashion-mnist\"\nnote = \"</script><b>\"\n");
  EXPECT_EQ(runs[0]["bad_lines"], 0);
  const json& ck = runs[0]["checkpoints"];
  ASSERT_EQ(ck.size(), 2u);  // .pt files only, oldest first
  EXPECT_EQ(ck[0]["name"], "checkpoint-e0001-s00000010.pt");
  EXPECT_EQ(ck[0]["bytes"], 1);
  EXPECT_EQ(ck[0]["latest"], false);
  EXPECT_EQ(ck[1]["name"], "checkpoint-e0002-s00000020.pt");
  EXPECT_EQ(ck[1]["bytes"], 5);
  EXPECT_EQ(ck[1]["latest"], true);
}

TEST(Report, ScriptEndInTheDataIsEscaped) {
  TempDir d;
  make_run(d / "run", 1);
  const std::string page = render_report({d / "run"});
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_NE(page.find("<\\/script><b>"), std::string::npos);
}

TEST(Report, SeveralRunsInOrderAndHalfWrittenLinesCounted) {
  TempDir d;
  make_run(d / "w1", 1);
  make_run(d / "w2/", 3);
  {
    std::ofstream f(d / "w2/metrics.jsonl", std::ios::app);
    f << "{\"kind\":\"train\",\"st\n";  // a line cut by a crash
  }
  const json runs = embedded_runs(render_report({d / "w1", d / "w2/"}));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["name"], "w1");
  EXPECT_EQ(runs[1]["name"], "w2");
  EXPECT_EQ(runs[0]["lines"].size(), 4u);
  EXPECT_EQ(runs[1]["lines"].size(), 8u);
  EXPECT_EQ(runs[1]["bad_lines"], 1);
  EXPECT_EQ(runs[1]["checkpoints"].size(), 0u);
}

TEST(Report, WriteIsAtomicAndReplacesTheOldPage) {
  TempDir d;
  make_run(d / "run", 1);
  test::write_file(d / "run/report.html", "old");
  write_report({d / "run"}, d / "run/report.html");
  const std::string page = test::read_file(d / "run/report.html");
  EXPECT_EQ(page, render_report({d / "run"}));
  for (const auto& e : std::filesystem::directory_iterator(d / "run"))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  write_report({d / "run"}, d / "new/dir/page.html");  // parent folders are made
  EXPECT_TRUE(std::filesystem::exists(d / "new/dir/page.html"));
}

TEST(Report, Errors) {
  TempDir d;
  EXPECT_THROW(render_report({}), InvalidArgument);
  try {
    render_report({d / "nothing"});
    FAIL() << "no metrics.jsonl: expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("nothing/metrics.jsonl"), std::string::npos) << e.what();
  }
  make_run(d / "run", 1);
  test::write_file(d / "file", "a file, not a folder");  // root cannot write under it either
  try {
    write_report({d / "run"}, d / "file/report.html");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file"), std::string::npos) << e.what();
  }
}

TEST(RankMetrics, FieldsPerRankInOrder) {
  // world 3: loss, accuracy, then samples/s, comm ms and exposed ms of ranks 0..2.
  const auto f = detail::rank_fields({0.5, 0.75, 10, 11, 12, 1, 2, 3, 0.1, 0.2, 0.3}, 3);
  ASSERT_EQ(f.size(), 9u);
  EXPECT_EQ(f[0], (std::pair<std::string, double>{"samples_per_s/rank0", 10}));
  EXPECT_EQ(f[2], (std::pair<std::string, double>{"samples_per_s/rank2", 12}));
  EXPECT_EQ(f[4], (std::pair<std::string, double>{"comm_ms/rank1", 2}));
  EXPECT_EQ(f[8], (std::pair<std::string, double>{"exposed_ms/rank2", 0.3}));
  EXPECT_THROW(detail::rank_fields({0.5, 0.75, 1, 2}, 3), InvalidArgument);
  EXPECT_THROW(detail::rank_fields({0.5, 10, 11, 12, 1, 2, 3, 0.1, 0.2, 0.3}, 3), InvalidArgument);  // no accuracy
}

}  // namespace
}  // namespace ddp::train
