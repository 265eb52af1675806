// The launcher's contract (ddp/dist/launch_env.h): each type's reader accepts what its declaration allows and
// refuses the rest naming the variable, the value and the rule; the table declares each name once.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ddp/dist/launch_env.h"
#include "ddp/errors.h"

namespace le = ddp::launch_env;

namespace {

std::string refusal(const std::function<void()>& read) {
  try {
    read();
  } catch (const ddp::InvalidArgument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(LaunchEnv, EachNameIsDeclaredOnceAndFound) {
  std::set<std::string> names;
  for (const le::EnvVar* v : le::kAll) {
    EXPECT_TRUE(names.insert(v->name).second) << v->name << " declared twice";
    EXPECT_EQ(le::find(v->name), v);
    EXPECT_STRNE(v->meaning, "") << v->name;
  }
  EXPECT_EQ(le::find("NOT_A_DDP_VARIABLE"), nullptr);
}

TEST(LaunchEnv, CountsAreIntegersInTheirRange) {
  EXPECT_EQ(le::count(le::kRank, le::fixed({{"RANK", "3"}})), 3);
  EXPECT_EQ(le::count(le::kRank, le::fixed({})), std::nullopt);
  EXPECT_EQ(le::count(le::kRank, le::fixed({{"RANK", ""}})), std::nullopt);  // empty: unset, as before
  for (const char* bad : {"-1", "1.5", " 2", "2x", "1e3", "99999999999"})
    EXPECT_EQ(refusal([&] {
                le::count(le::kRank, le::fixed({{"RANK", bad}}));
              }),
              std::string("[init] RANK='") + bad + "' must be an integer in [0, 1073741824] (the rank in the job)");
  EXPECT_EQ(le::count(le::kMasterPort, le::fixed({{"MASTER_PORT", "65535"}})), 65535);
  EXPECT_NE(le::problem(le::kMasterPort, "0"), "");
  EXPECT_NE(le::problem(le::kMasterPort, "65536"), "");
}

TEST(LaunchEnv, SecondsKeepTheirRangeAndSayWhatZeroDoes) {
  EXPECT_EQ(le::seconds(le::kTimeout, le::fixed({{"DDP_TIMEOUT", "0.5"}})), 0.5);
  EXPECT_EQ(refusal([] {
              le::seconds(le::kTimeout, le::fixed({{"DDP_TIMEOUT", "0"}}));
            }),
            "[init] DDP_TIMEOUT='0' must be a positive number of seconds (at most 1e7)");
  for (const char* bad : {"inf", "nan", "-1", "2s", "1e8"}) EXPECT_NE(le::problem(le::kTimeout, bad), "") << bad;
  EXPECT_EQ(le::seconds(le::kHeartbeatTimeout, le::fixed({{"DDP_HEARTBEAT_TIMEOUT", "0"}})), 0.0);
  EXPECT_EQ(le::problem(le::kHeartbeatTimeout, "-1"),
            "DDP_HEARTBEAT_TIMEOUT='-1' must be a number of seconds >= 0 (at most 1e7; 0 turns the heartbeat off)");
  EXPECT_EQ(le::problem(le::kExitLinger, "61"), "DDP_EXIT_LINGER='61' must be a number of seconds >= 0 (at most 60)");
  EXPECT_EQ(le::parse_seconds(le::kExitLinger, "60"), 60.0);
  EXPECT_THROW(le::parse_seconds(le::kExitLinger, ""), ddp::InvalidArgument);
}

TEST(LaunchEnv, ChoicesIgnoreCaseAndComeBackAsDeclared) {
  EXPECT_EQ(le::choice(le::kDebug, le::fixed({{"DDP_DEBUG", "detail"}})), "DETAIL");
  EXPECT_EQ(le::choice(le::kContinuations, le::fixed({{"DDP_CONTINUATIONS", "waiter"}})), "waiter");
  EXPECT_EQ(refusal([] {
              le::choice(le::kTty, le::fixed({{"DDP_TTY", "yes"}}));
            }),
            "[init] DDP_TTY='yes' must be one of 1 or 0: 1: the rank's stdout reaches a terminal; 0: it does not");
  EXPECT_EQ(le::problem(le::kBackend, "gloo"), "");
  EXPECT_NE(le::problem(le::kBackend, "ucc"), "");
}

TEST(LaunchEnv, FirstCountTakesTheFirstSetAndErrorPathsSkipBadOnes) {
  const auto env = le::fixed({{"OMPI_COMM_WORLD_RANK", "2"}, {"SLURM_PROCID", "5"}});
  EXPECT_EQ(le::first_count({&le::kRank, &le::kOmpiRank, &le::kSlurmProcId}, env), 2);
  const auto bad = le::fixed({{"RANK", "x"}, {"OMPI_COMM_WORLD_RANK", "1"}});
  EXPECT_THROW(le::first_count({&le::kRank, &le::kOmpiRank}, bad), ddp::InvalidArgument);
  EXPECT_EQ(le::first_valid_count({&le::kRank, &le::kOmpiRank}, bad), 1);  // an error file's rank: never throws
}

TEST(LaunchEnv, SecondsAreWrittenBackExactlyWithoutExponents) {
  for (double s : {0.0, 0.5, 30.0, 2.5, 0.001, 1e7, 86400.0}) {
    const std::string text = le::format_seconds(s);
    EXPECT_EQ(text.find('e'), std::string::npos) << text;
    EXPECT_EQ(le::parse_seconds(le::kHeartbeatTimeout, text), s) << text;
  }
  EXPECT_EQ(le::format_seconds(30), "30");
  EXPECT_EQ(le::format_seconds(0.5), "0.5");
}
