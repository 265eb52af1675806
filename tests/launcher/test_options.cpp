// Unit tests of ddprun's command line parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "cli/flags.h"
#include "cli/options.h"
#include "support/scoped_env.h"

using ddprun::Backend;
using ddprun::Options;
using ddprun::parse_options;
using ddprun::ParseOutcome;

namespace {

constexpr int kCpus = 6;

ParseOutcome parse(const std::vector<std::string>& args) { return parse_options(args, kCpus); }

Options parse_ok(const std::vector<std::string>& args) {
  ParseOutcome out = parse(args);
  EXPECT_EQ(out.kind, ParseOutcome::kRun) << out.error;
  return out.options;
}

std::string parse_error(const std::vector<std::string>& args) {
  ParseOutcome out = parse(args);
  EXPECT_EQ(out.kind, ParseOutcome::kError);
  EXPECT_EQ(out.error.find('\n'), std::string::npos) << "error must be one line: " << out.error;
  return out.error;
}

}  // namespace

TEST(Options, Defaults) {
  Options o = parse_ok({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_FALSE(o.standalone);
  EXPECT_EQ(o.backend, Backend::kAuto);
  EXPECT_DOUBLE_EQ(o.kill_grace_s, 5.0);
  EXPECT_EQ(o.program, "prog");
  EXPECT_TRUE(o.program_args.empty());
}

TEST(Options, EveryFlagWithDashesAndSeparateValue) {
  Options o = parse_ok({"--nproc-per-node", "4", "--nnodes", "3", "--node-rank", "2", "--master-addr", "10.0.0.5",
                        "--master-port", "1234", "--backend", "gloo", "--kill-grace", "1.5", "prog", "a", "b"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.5");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.backend, Backend::kGloo);
  EXPECT_DOUBLE_EQ(o.kill_grace_s, 1.5);
  EXPECT_EQ(o.program, "prog");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"a", "b"}));
}

TEST(Options, EveryFlagWithUnderscoresAndEquals) {
  Options o = parse_ok({"--nproc_per_node=3", "--nnodes=2", "--node_rank=1", "--master_addr=node0",
                        "--master_port=4321", "--backend=gloo", "--kill_grace=0", "prog"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "node0");
  EXPECT_EQ(o.master_port, 4321);
  EXPECT_EQ(o.backend, Backend::kGloo);
  EXPECT_EQ(parse_ok({"--backend=mpi", "prog"}).backend, Backend::kMpi);
  EXPECT_DOUBLE_EQ(o.kill_grace_s, 0.0);
}

TEST(Options, DashFormsWithEquals) {
  Options o = parse_ok({"--nproc-per-node=2", "--node-rank=0", "--master-addr=h", "--master-port=7", "--kill-grace=2",
                        "--backend=auto", "prog"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.master_addr, "h");
  EXPECT_EQ(o.master_port, 7);
  EXPECT_DOUBLE_EQ(o.kill_grace_s, 2.0);
  EXPECT_EQ(o.backend, Backend::kAuto);
}

TEST(Options, NprocAutoIsOnlineCores) {
  EXPECT_EQ(parse_ok({"--nproc-per-node", "auto", "prog"}).nproc_per_node, kCpus);
  EXPECT_EQ(parse_ok({"--nproc_per_node=auto", "prog"}).nproc_per_node, kCpus);
}

TEST(Options, Standalone) {
  Options o = parse_ok({"--standalone", "--nproc-per-node", "2", "prog"});
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(parse_error({"--standalone=yes", "prog"}), "option --standalone takes no value");
}

TEST(Options, ProgramArgumentsAreNotParsed) {
  Options o = parse_ok({"--nnodes", "1", "prog", "--nproc-per-node", "9", "--", "-x"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.program, "prog");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--nproc-per-node", "9", "--", "-x"}));
}

TEST(Options, DoubleDashEndsOptions) {
  Options o = parse_ok({"--nproc-per-node", "2", "--", "--weird-program-name", "x"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.program, "--weird-program-name");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"x"}));
}

TEST(Options, Help) {
  EXPECT_EQ(parse({"-h"}).kind, ParseOutcome::kHelp);
  EXPECT_EQ(parse({"--nnodes", "1", "--help", "prog"}).kind, ParseOutcome::kHelp);
  EXPECT_EQ(parse({"prog", "--help"}).kind, ParseOutcome::kRun);  // --help of the program
  const std::string usage = ddprun::usage_text();
  for (const char* flag :
       {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--standalone", "--backend",
        "--kill-grace", "--timeout", "DDP_TIMEOUT", "--heartbeat-timeout", "DDP_HEARTBEAT_TIMEOUT", "--rdzv-timeout",
        "DDP_RDZV_TIMEOUT", "--oversubscribe", "[--] program [program args...]", "exit status"})
    EXPECT_NE(usage.find(flag), std::string::npos) << flag << " missing from:\n" << usage;
}

// An inherited DDP_HEARTBEAT_TIMEOUT that is not a number of seconds is refused (nan and inf too), unless
// --heartbeat-timeout replaces it; a valid one is the default.
TEST(Options, InheritedHeartbeatTimeoutIsChecked) {
  for (const char* bad : {"nan", "inf", "-1", "abc"}) {
    ::setenv("DDP_HEARTBEAT_TIMEOUT", bad, 1);
    EXPECT_EQ(parse_error({"prog"}), std::string("in the environment: DDP_HEARTBEAT_TIMEOUT='") + bad +
                                         "' must be a number of seconds >= 0 (at most 1e7; 0 turns the heartbeat "
                                         "off); unset it or give --heartbeat-timeout");
    ParseOutcome given = parse({"--heartbeat-timeout", "3", "prog"});
    EXPECT_EQ(given.kind, ParseOutcome::kRun) << given.error;
    EXPECT_EQ(given.options.heartbeat_timeout_s, 3);
  }
  ::setenv("DDP_HEARTBEAT_TIMEOUT", "7.5", 1);
  ParseOutcome inherited = parse({"prog"});
  EXPECT_EQ(inherited.kind, ParseOutcome::kRun) << inherited.error;
  EXPECT_EQ(inherited.options.heartbeat_timeout_s, 7.5);
  ::unsetenv("DDP_HEARTBEAT_TIMEOUT");
}

TEST(Options, BadNumbers) {
  EXPECT_EQ(parse_error({"--nproc-per-node", "0", "prog"}),
            "invalid value '0' for --nproc-per-node: expected an integer >= 1 or 'auto'");
  EXPECT_EQ(parse_error({"--nproc_per_node=abc", "prog"}),
            "invalid value 'abc' for --nproc-per-node: expected an integer >= 1 or 'auto'");
  EXPECT_EQ(parse_error({"--nproc-per-node", "-2", "prog"}),
            "invalid value '-2' for --nproc-per-node: expected an integer >= 1 or 'auto'");
  EXPECT_EQ(parse_error({"--nproc-per-node", "99999999999", "prog"}),
            "invalid value '99999999999' for --nproc-per-node: expected an integer >= 1 or 'auto'");
  EXPECT_EQ(parse_error({"--nproc-per-node=", "prog"}),
            "invalid value '' for --nproc-per-node: expected an integer >= 1 or 'auto'");
  EXPECT_EQ(parse_error({"--nnodes", "0", "prog"}),
            "invalid value '0' for --nnodes: expected an integer >= 1 or MIN:MAX");
  EXPECT_EQ(parse_error({"--node-rank", "x", "prog"}), "invalid value 'x' for --node-rank: expected an integer >= 0");
  EXPECT_EQ(parse_error({"--master-port", "70000", "prog"}),
            "invalid value '70000' for --master-port: expected a TCP port number 1..65535");
  EXPECT_EQ(parse_error({"--master_port=0", "prog"}),
            "invalid value '0' for --master-port: expected a TCP port number 1..65535");
  EXPECT_EQ(parse_error({"--master-port", "12ab", "prog"}),
            "invalid value '12ab' for --master-port: expected a TCP port number 1..65535");
  EXPECT_EQ(parse_error({"--kill-grace", "-1", "prog"}),
            "invalid value '-1' for --kill-grace: expected a number of seconds >= 0 (e.g. 5 or 0.5)");
  EXPECT_EQ(parse_error({"--kill-grace", "soon", "prog"}),
            "invalid value 'soon' for --kill-grace: expected a number of seconds >= 0 (e.g. 5 or 0.5)");
  EXPECT_EQ(parse_error({"--master-addr", "", "prog"}),
            "invalid value '' for --master-addr: expected a host name or IP address");
  for (const char* bad : {"inf", "nan", "0", "-5"})
    EXPECT_EQ(parse_error({"--rdzv-timeout", bad, "prog"}),
              std::string("invalid value '") + bad +
                  "' for --rdzv-timeout: expected a positive number of seconds (at most 1e7)");
  EXPECT_EQ(parse_ok({"--rdzv-timeout", "900", "prog"}).rdzv_timeout_s, 900);
}

TEST(Options, Timeouts) {
  Options o = parse_ok({"prog"});
  EXPECT_FALSE(o.timeout_s.has_value());
  EXPECT_DOUBLE_EQ(o.heartbeat_timeout_s, 30.0);
  o = parse_ok({"--timeout", "90", "--heartbeat-timeout=2.5", "prog"});
  EXPECT_EQ(o.timeout_s, 90);
  EXPECT_DOUBLE_EQ(o.heartbeat_timeout_s, 2.5);
  o = parse_ok({"--timeout=0.5", "--heartbeat_timeout", "0", "prog"});
  EXPECT_EQ(o.timeout_s, 0.5);
  EXPECT_DOUBLE_EQ(o.heartbeat_timeout_s, 0.0);
  // The flags take what the ranks take from the variables they set (launch_env.h): one rule, up to 1e7 s.
  EXPECT_EQ(parse_ok({"--timeout", "1e5", "prog"}).timeout_s, 1e5);
  for (const char* bad : {"0", "-3", "abc", "", "1.2.3", "1e8", "inf", "nan"})
    EXPECT_EQ(
        parse_error({"--timeout", bad, "prog"}),
        std::string("invalid value '") + bad + "' for --timeout: expected a positive number of seconds (at most 1e7)");
  for (const char* bad : {"-1", "x", "", "inf"})
    EXPECT_EQ(parse_error({"--heartbeat-timeout", bad, "prog"}),
              std::string("invalid value '") + bad +
                  "' for --heartbeat-timeout: expected a number of seconds >= 0 (at most 1e7; 0 turns the heartbeat "
                  "off)");
}

TEST(Options, BadBackend) {
  EXPECT_EQ(parse_error({"--backend", "nvlink", "prog"}),
            "invalid value 'nvlink' for --backend: expected one of gloo, mpi, nccl, auto");
}

TEST(Options, NodeRankMustBeBelowNnodes) {
  EXPECT_EQ(parse_error({"--nnodes", "2", "--node-rank", "2", "prog"}),
            "invalid value '2' for --node-rank: must be less than --nnodes (2)");
  EXPECT_EQ(parse_error({"--node_rank=1", "prog"}),
            "invalid value '1' for --node-rank: must be less than --nnodes (1)");
  EXPECT_EQ(parse_ok({"--nnodes", "2", "--node-rank", "1", "prog"}).node_rank, 1);
}

TEST(Options, ElasticRangeNeedsC10d) {
  EXPECT_EQ(parse_error({"--nnodes", "1:2", "prog"}),
            "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT], the same on every node (c10d is the default "
            "with --nnodes MIN:MAX or --rdzv-endpoint)");
  EXPECT_EQ(parse_error({"--nnodes", "1:2", "--rdzv-backend", "static", "prog"}),
            "--nnodes 1:2 (an elastic range) needs --rdzv-backend c10d, not static");
  Options fixed = parse_ok({"--nnodes=2:2", "prog"});  // a fixed "range": static as before
  EXPECT_EQ(fixed.nnodes, 2);
  EXPECT_EQ(fixed.rdzv_backend, ddprun::Rdzv::kStatic);
}

TEST(Options, C10dRendezvous) {
  Options o = parse_ok({"--nnodes", "1:3", "--rdzv-endpoint", "node0", "--nproc-per-node", "2", "prog"});
  EXPECT_EQ(o.rdzv_backend, ddprun::Rdzv::kC10d);
  EXPECT_EQ(o.nnodes_min, 1);
  EXPECT_EQ(o.nnodes_max, 3);
  EXPECT_EQ(o.rdzv_host, "node0");
  EXPECT_EQ(o.rdzv_port, 29400);  // torchrun's default
  EXPECT_EQ(o.rdzv_id, "none-node0:29400");
  EXPECT_DOUBLE_EQ(o.last_call_timeout_s, 1.0);
  EXPECT_DOUBLE_EQ(o.join_timeout_s, 600.0);
  o = parse_ok({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.0.1:1234", "--rdzv-id", "j", "--rdzv-conf",
                "join_timeout=30,last_call_timeout=0.5", "--max-restarts", "2", "prog"});
  EXPECT_EQ(o.rdzv_backend, ddprun::Rdzv::kC10d);
  EXPECT_EQ(o.nnodes_min, 2);
  EXPECT_EQ(o.nnodes_max, 2);
  EXPECT_EQ(o.rdzv_host, "10.0.0.1");
  EXPECT_EQ(o.rdzv_port, 1234);
  EXPECT_EQ(o.rdzv_id, "j");
  EXPECT_DOUBLE_EQ(o.last_call_timeout_s, 0.5);
  EXPECT_DOUBLE_EQ(o.join_timeout_s, 30.0);
  EXPECT_EQ(o.max_restarts, 2);
  // An endpoint alone selects c10d.
  EXPECT_EQ(parse_ok({"--rdzv-endpoint", "h", "prog"}).rdzv_backend, ddprun::Rdzv::kC10d);
}

TEST(Options, C10dBadInput) {
  EXPECT_EQ(parse_error({"--nnodes", "3:2", "prog"}), "invalid value '3:2' for --nnodes: MIN is larger than MAX");
  EXPECT_EQ(parse_error({"--nnodes", "0:2", "prog"}), "invalid value '0:2' for --nnodes: MIN must be at least 1");
  EXPECT_EQ(parse_error({"--nnodes", "1:x", "prog"}),
            "invalid value '1:x' for --nnodes: expected MIN:MAX with integers 1 <= MIN <= MAX");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h:0", "prog"}),
            "invalid value 'h:0' for --rdzv-endpoint: the port must be a number 1..65535");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h:", "prog"}),
            "invalid value 'h:' for --rdzv-endpoint: the port must be a number 1..65535");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", ":29400", "prog"}),
            "invalid value ':29400' for --rdzv-endpoint: expected HOST or HOST:PORT (a host name or IPv4 address)");
  EXPECT_EQ(parse_error({"--rdzv-backend", "etcd", "prog"}),
            "invalid value 'etcd' for --rdzv-backend: expected static or c10d");
  EXPECT_EQ(parse_error({"--nnodes", "1:2", "--rdzv-endpoint", "h", "--node-rank", "1", "prog"}),
            "--node-rank cannot be used with --rdzv-backend c10d: node ranks are assigned at the rendezvous (c10d is "
            "the default with --nnodes MIN:MAX or --rdzv-endpoint); use --rdzv-backend static for fixed node ranks");
  EXPECT_EQ(parse_error({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h", "--master-port", "5", "prog"}),
            "--master-addr/--master-port cannot be used with --rdzv-backend c10d: the rendezvous picks node rank 0's "
            "address and a free port each round");
  EXPECT_EQ(parse_error({"--rdzv-backend", "c10d", "--nnodes", "2", "prog"}),
            "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT], the same on every node");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h", "--standalone", "prog"}),
            "--standalone cannot be used with --rdzv-backend c10d (c10d is the default with --nnodes MIN:MAX or "
            "--rdzv-endpoint)");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h", "--backend", "mpi", "prog"}),
            "--backend mpi cannot be used with --rdzv-backend c10d (c10d is the default with --nnodes MIN:MAX or "
            "--rdzv-endpoint)");
  EXPECT_EQ(parse_error({"--rdzv-backend", "static", "--rdzv-endpoint", "h", "prog"}),
            "--rdzv-endpoint needs --rdzv-backend c10d; with static give --master-addr/--master-port");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h", "--rdzv-conf", "timeout=3", "prog"}),
            "invalid value 'timeout=3' for --rdzv-conf: unknown key 'timeout' (known: last_call_timeout, "
            "join_timeout)");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h", "--rdzv-conf", "join_timeout=0", "prog"}),
            "invalid value 'join_timeout=0' for --rdzv-conf: join_timeout expects seconds > 0, got '0'");
  EXPECT_EQ(parse_error({"--rdzv-endpoint", "h", "--rdzv-conf", "last_call_timeout", "prog"}),
            "invalid value 'last_call_timeout' for --rdzv-conf: expected KEY=VALUE[,KEY=VALUE] with keys "
            "last_call_timeout, join_timeout");
}

TEST(Options, StandaloneWithSeveralNodes) {
  EXPECT_EQ(parse_error({"--standalone", "--nnodes", "2", "prog"}),
            "--standalone runs a single node and cannot be used with --nnodes 2");
}

TEST(Options, MpiWithSeveralNodes) {
  EXPECT_EQ(parse_error({"--backend", "mpi", "--nnodes", "2", "prog"}),
            "--backend mpi supports a single node only (got --nnodes 2); for several nodes run mpirun with a "
            "hostfile directly");
}

TEST(Options, UnknownFlag) {
  EXPECT_EQ(parse_error({"--nproc", "2", "prog"}), "unknown option '--nproc' (see ddprun --help)");
  EXPECT_EQ(parse_error({"--rdzv-timeut=3", "prog"}), "unknown option '--rdzv-timeut' (see ddprun --help)");
  EXPECT_EQ(parse_error({"-n", "prog"}), "unknown option '-n' (see ddprun --help)");
}

TEST(Options, RepeatedFlagLastWins) {  // as torchrun's argparse
  EXPECT_EQ(parse_ok({"--nproc-per-node=3", "--nproc_per_node", "2", "prog"}).nproc_per_node, 2);
}

TEST(Options, MissingValue) { EXPECT_EQ(parse_error({"--nproc-per-node"}), "option --nproc-per-node needs a value"); }

TEST(Options, MissingProgram) {
  const std::string expected = "missing program to run (usage: ddprun [options] program [args...])";
  EXPECT_EQ(parse_error({}), expected);
  EXPECT_EQ(parse_error({"--nproc-per-node", "2"}), expected);
  EXPECT_EQ(parse_error({"--nproc-per-node", "2", "--"}), expected);
}

TEST(Options, RestartFlags) {
  Options d = parse_ok({"prog"});
  EXPECT_EQ(d.max_restarts, 0);
  EXPECT_EQ(d.monitor_interval_s, 1.0);
  EXPECT_EQ(d.rdzv_id.size(), 16u) << d.rdzv_id;  // one node without --rdzv-id: a random id (16 hex digits)
  EXPECT_EQ(d.rdzv_id.find_first_not_of("0123456789abcdef"), std::string::npos) << d.rdzv_id;
  EXPECT_NE(parse_ok({"prog"}).rdzv_id, d.rdzv_id);            // another job, another id
  EXPECT_EQ(parse_ok({"--nnodes", "2", "prog"}).rdzv_id, "");  // several nodes: none-ADDR:PORT when exported
  EXPECT_EQ(d.role, "default");
  EXPECT_EQ(d.log_dir, "");
  EXPECT_EQ(d.redirects, 0);
  EXPECT_EQ(d.tee, 0);
  Options o = parse_ok({"--max_restarts=3", "--monitor-interval", "0.1", "--rdzv_id", "j", "--role", "r", "--log-dir",
                        "/tmp/l", "-r", "2", "--tee=1", "prog"});
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.monitor_interval_s, 0.1);
  EXPECT_EQ(o.rdzv_id, "j");
  EXPECT_EQ(o.role, "r");
  EXPECT_EQ(o.log_dir, "/tmp/l");
  EXPECT_EQ(o.redirects, 2);
  EXPECT_EQ(o.tee, 1);
  EXPECT_EQ(parse_error({"--max-restarts", "x", "prog"}),
            "invalid value 'x' for --max-restarts: expected an integer >= 0");
  EXPECT_EQ(parse_error({"--tee", "1", "prog"}),
            "--tee needs --log-dir DIR: the directory the ranks' log files are written to");
  EXPECT_EQ(parse_error({"--role", "a b", "prog"}),
            "invalid value 'a b' for --role: expected a non-empty name without spaces or '='");
}

TEST(Options, MinRanksNeedsInplaceAndAtMostTheRanksStarted) {
  EXPECT_EQ(parse_ok({"prog"}).min_ranks, 1);
  EXPECT_EQ(parse_ok({"--nproc-per-node", "4", "--recovery", "inplace", "--min-ranks", "3", "prog"}).min_ranks, 3);
  EXPECT_EQ(parse_error({"--nproc-per-node", "4", "--min-ranks", "3", "prog"}),
            "--min-ranks needs --recovery inplace: with --recovery restart any lost rank stops every rank");
  EXPECT_EQ(parse_error({"--nproc-per-node", "2", "--recovery", "inplace", "--min-ranks", "3", "prog"}),
            "--min-ranks 3 is more than the 2 rank(s) started (--nproc-per-node); give at most that many");
  EXPECT_EQ(parse_error({"--min-ranks", "0", "prog"}), "invalid value '0' for --min-ranks: expected an integer >= 1");
  EXPECT_EQ(
      parse_error({"--nnodes", "2", "--nproc-per-node", "2", "--recovery", "inplace", "--min-ranks", "2", "prog"}),
      "--min-ranks counts one node's ranks: it cannot be used with --nnodes 2 yet");
}

TEST(Options, InplaceRunsAcrossNodesWithReplacements) {
  const Options o = parse_ok({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--recovery", "inplace",
                              "--max-restarts", "2", "prog"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.max_restarts, 2);  // replacements: a node cannot restart the job alone
  EXPECT_NE(parse_error({"--nnodes", "2", "--max-restarts", "2", "prog"}).find("needs --rdzv-backend c10d"),
            std::string::npos);
  const Options elastic = parse_ok({"--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--recovery", "inplace", "prog"});
  EXPECT_EQ(elastic.nnodes_max, 2);  // c10d: nodes that come attach to the running round
  EXPECT_EQ(
      parse_error({"--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--recovery", "inplace", "--min-ranks", "2", "prog"}),
      "--min-ranks counts one node's ranks: it cannot be used with --nnodes 1:2 yet");
}

TEST(Options, MoreThanFourRanksPerCoreNeedOversubscribe) {
  EXPECT_EQ(parse_ok({"--nproc-per-node", "24", "prog"}).nproc_per_node, 4 * kCpus);
  const std::string e = parse_error({"--nproc-per-node", "1000", "prog"});
  EXPECT_NE(e.find("--nproc-per-node 1000 starts that many ranks on 6 online core(s), more than 4 per core"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--oversubscribe"), std::string::npos) << e;
  Options o = parse_ok({"--nproc-per-node", "25", "--oversubscribe", "prog", "--x"});
  EXPECT_EQ(o.nproc_per_node, 25);
  EXPECT_TRUE(o.oversubscribe);
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--x"}));
  EXPECT_FALSE(parse_ok({"prog"}).oversubscribe);
}

// Each flag is declared once (flags.cpp): the help shows the default the declaration gives, and that default is a
// value the flag's own rule takes.
TEST(Options, HelpShowsEachDeclaredDefault) {
  const std::string usage = ddprun::usage_text();
  for (const ddprun::Flag& f : ddprun::flags()) {
    EXPECT_NE(usage.find(f.help_line()), std::string::npos) << f.name() << "'s help is missing from:\n" << usage;
    if (f.fallback.empty()) continue;
    ParseOutcome out = parse({f.name(), f.fallback, "prog"});
    EXPECT_EQ(out.kind, ParseOutcome::kRun) << f.name() << " " << f.fallback << ": " << out.error;
  }
  EXPECT_NE(usage.find("TCP port on node 0 [default 29500]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("[default last_call_timeout=1,join_timeout=600]"), std::string::npos) << usage;
  EXPECT_NE(usage.find("DDP_TIMEOUT [default the ranks' own, 600]"), std::string::npos) << usage;
  EXPECT_EQ(ddprun::find_flag("--node_rank"), ddprun::find_flag("--node-rank"));
  EXPECT_EQ(ddprun::find_flag("--node"), nullptr);
}

TEST(Options, SwitchesTakeNoValue) {
  EXPECT_EQ(parse_error({"--oversubscribe=yes", "prog"}), "option --oversubscribe takes no value");
  Options o = parse_ok({"--oversubscribe", "--standalone", "prog"});
  EXPECT_TRUE(o.oversubscribe && o.standalone);
}

// docs/launcher.md's option table has a row for every flag and no other, and shows the declared default of each
// flag whose default is a value.
TEST(Options, DocsTableMatchesTheDeclarations) {
  std::ifstream in(DDP_LAUNCHER_DOC);
  ASSERT_TRUE(in) << DDP_LAUNCHER_DOC;
  std::map<std::string, std::string> rows;  // first flag of the row -> default cell
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("| option | default | meaning |", 0) == 0) in_table = true;
    if (!in_table) continue;
    if (line.empty()) break;
    if (line.rfind("| `-", 0) != 0) continue;
    const size_t tick = line.find('`', 3);
    std::string flag = line.substr(3, tick - 3);
    flag = flag.substr(0, flag.find(' '));
    const size_t cell = line.find("| ", tick) + 2;
    std::string value = line.substr(cell, line.find(" |", cell) - cell);
    value.erase(std::remove(value.begin(), value.end(), '`'), value.end());
    rows[flag] = value;
  }
  for (const ddprun::Flag& f : ddprun::flags()) {
    auto row = rows.find(f.name());
    ASSERT_NE(row, rows.end()) << f.name() << " has no row in " << DDP_LAUNCHER_DOC;
    if (f.is_switch) {
      EXPECT_EQ(row->second, "off") << f.name();
    } else if (f.default_note.empty() && !f.fallback.empty()) {
      EXPECT_EQ(row->second, f.fallback) << f.name() << ": the docs' default differs from the declaration";
    }
    rows.erase(row);
  }
  rows.erase("-h");  // CLI11's own
  for (const auto& [flag, value] : rows) ADD_FAILURE() << DDP_LAUNCHER_DOC << " documents " << flag << ", not a flag";
}

// srun ddprun ...: one ddprun per node started by srun takes the static rendezvous's flags from Slurm's variables
// (node count and rank, node 0's address, the job's port and id); a flag given wins.
namespace {
struct SrunNode {  // what srun gives the ddprun of the second of two nodes, one task each, in job 4077
  std::vector<std::unique_ptr<ddp::test::ScopedEnv>> vars;
  explicit SrunNode(const char* tasks_per_node = "1(x2)") {
    for (const char* unset : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"})
      vars.push_back(std::make_unique<ddp::test::ScopedEnv>(unset, nullptr));
    const std::pair<const char*, const char*> set[] = {{"SLURM_PROCID", "1"},
                                                       {"SLURM_STEP_NUM_TASKS", "2"},
                                                       {"SLURM_NODEID", "1"},
                                                       {"SLURM_LOCALID", "0"},
                                                       {"SLURM_STEP_NUM_NODES", "2"},
                                                       {"SLURM_JOB_ID", "4077"},
                                                       {"SLURM_STEP_NODELIST", "node[1-2]"},
                                                       {"SLURM_STEP_TASKS_PER_NODE", tasks_per_node}};
    for (const auto& [name, value] : set) vars.push_back(std::make_unique<ddp::test::ScopedEnv>(name, value));
  }
};
}  // namespace

TEST(Options, SrunGivesTheStaticRendezvousFlags) {
  SrunNode node;
  Options o = parse_ok({"--nproc-per-node", "2", "prog"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "node1");
  EXPECT_EQ(o.master_port, 19077);
  EXPECT_EQ(o.rdzv_id, "4077");
  EXPECT_EQ(o.placement,
            "--nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank 1 (SLURM_NODEID), --master-addr node1 (the first host of "
            "SLURM_STEP_NODELIST), --master-port 19077 (15000 + the last four digits of SLURM_JOB_ID), --rdzv-id 4077 "
            "(SLURM_JOB_ID)");
  Options given = parse_ok({"--master-port", "29555", "--master-addr", "10.1.1.1", "prog"});
  EXPECT_EQ(given.master_port, 29555);
  EXPECT_EQ(given.master_addr, "10.1.1.1");
  EXPECT_EQ(given.node_rank, 1);
  EXPECT_EQ(given.placement.find("--master"), std::string::npos) << given.placement;
  // --standalone, or a c10d rendezvous, is the user's own choice: Slurm's variables stay out of it.
  EXPECT_EQ(parse_ok({"--standalone", "prog"}).placement, "");
}

TEST(Options, SrunWithSeveralDdprunPerNodeIsRefused) {
  SrunNode node("2(x2)");
  EXPECT_EQ(parse_error({"prog"}),
            "srun started 2 ddprun on this node (this node's entry of SLURM_STEP_TASKS_PER_NODE): one ddprun per node "
            "starts its ranks; run it as 'srun --ntasks-per-node 1 ddprun ...'");
}
