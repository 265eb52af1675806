// Unit tests of ddprun_core pieces that need no child processes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "launcher_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "ddp/dist/launch_env.h"
#include "launch/elastic.h"
#include "launch/mpi_launch.h"
#include "launch/net_check.h"
#include "launch/program_lookup.h"
#include "launch/rank_env.h"
#include "output/line_splitter.h"
#include "output/mpi_output.h"
#include "output/summary.h"
#include "supervise/signals.h"

using namespace ddprun;

namespace {

// The static rendezvous' first attempt for `o` at its --master-addr and `port`, with gloo.
Attempt attempt_at(const Options& o, int port) {
  Attempt a;
  a.place = static_placement(o, o.master_addr, port);
  return a;
}

std::vector<std::string> split(LineSplitter& splitter, const std::vector<std::string>& chunks, bool finish) {
  std::vector<std::string> lines;
  auto emit = [&](std::string_view line) { lines.emplace_back(line); };
  for (const std::string& chunk : chunks) splitter.feed(chunk.data(), chunk.size(), emit);
  if (finish) splitter.finish(emit);
  return lines;
}

}  // namespace

TEST(LineSplitter, CompleteLinesAcrossChunks) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"ab", "c\nde", "f\n\ng\n"}, false), (std::vector<std::string>{"abc", "def", "", "g"}));
  EXPECT_EQ(s.pending(), 0u);
}

TEST(LineSplitter, PartialLastLineOnlyAtFinish) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"one\ntw", "o"}, false), (std::vector<std::string>{"one"}));
  EXPECT_EQ(s.pending(), 3u);
  EXPECT_EQ(split(s, {}, true), (std::vector<std::string>{"two"}));
  EXPECT_EQ(split(s, {}, true), (std::vector<std::string>{}));
}

TEST(LineSplitter, LongLineIsFlushedInPieces) {
  LineSplitter s(4);
  EXPECT_EQ(split(s, {"abcdefghij\n"}, false), (std::vector<std::string>{"abcd", "efgh", "ij"}));
  // Exactly max bytes, then the newline in a later chunk: no empty extra line.
  EXPECT_EQ(split(s, {"wxyz", "\nk\n"}, false), (std::vector<std::string>{"wxyz", "k"}));
  EXPECT_EQ(split(s, {"12", "34", "56", "\n"}, false), (std::vector<std::string>{"1234", "56"}));
}

TEST(LineSplitter, RedrawnLineShowsTheTextAfterItsLastCarriageReturn) {
  LineSplitter s;
  EXPECT_EQ(split(s, {"plain"}, false), (std::vector<std::string>{}));
  EXPECT_EQ(s.redrawn(), "");  // no '\r': nothing to redraw
  EXPECT_EQ(split(s, {"\r[=> ] 1/2\x1b[K"}, false), (std::vector<std::string>{}));
  EXPECT_EQ(s.redrawn(), "[=> ] 1/2\x1b[K");
  EXPECT_EQ(split(s, {"\r[==] 2/2"}, false), (std::vector<std::string>{}));
  EXPECT_EQ(s.redrawn(), "[==] 2/2");
  EXPECT_EQ(split(s, {"\n"}, false), (std::vector<std::string>{"plain\r[=> ] 1/2\x1b[K\r[==] 2/2"}));
  EXPECT_EQ(s.redrawn(), "");
}

TEST(LineSplitter, ShownTextOfALine) {
  EXPECT_EQ(shown_text("a\rb\rc"), "c");
  EXPECT_EQ(shown_text("windows line\r"), "windows line");  // a trailing '\r' (CRLF) is not a redraw
  EXPECT_EQ(shown_text("\rbar\r\r"), "bar");
  EXPECT_EQ(shown_text("no carriage return"), "no carriage return");
  EXPECT_EQ(shown_text(""), "");
}

TEST(LineSplitter, DefaultLimitIs64KiB) {
  LineSplitter s;
  std::string big(kMaxLineBytes * 2 + 5, 'x');
  std::vector<std::string> lines = split(s, {big}, true);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), 65536u);
  EXPECT_EQ(lines[1].size(), 65536u);
  EXPECT_EQ(lines[2].size(), 5u);
}

TEST(TailBuffer, KeepsLastLines) {
  TailBuffer t(3, 5);
  for (const char* l : {"a", "b", "c", "d", "0123456789"}) t.add(l);
  EXPECT_EQ(t.lines(), (std::vector<std::string>{"c", "d", "01234..."}));
}

TEST(MpiOutput, ParsesTaggedLines) {
  MpiLineDemux d;
  auto t = d.feed("[1,2]<stdout>:hello [x]");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 2);
  EXPECT_FALSE(t->is_stderr);
  EXPECT_EQ(t->text, "hello [x]");
  t = d.feed("[31146,13]<stderr>:");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 13);
  EXPECT_TRUE(t->is_stderr);
  EXPECT_EQ(t->text, "");
  t = d.feed("[1,0]<stddiag>:diag");
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->is_stderr);
  EXPECT_FALSE(d.feed("-----------------").has_value());
  EXPECT_FALSE(d.feed("[1,x]<stdout>:a").has_value());
  EXPECT_FALSE(d.feed("[1,2]<other>:a").has_value());
  EXPECT_FALSE(d.feed("  Process name: [[31146,1],1]").has_value());
  // A line written in pieces: mpirun tags each piece, inside the line and at its end.
  t = d.feed("[7,1]<stderr>:ddp-train: warning: [7,1]<stderr>:resuming x with [y] [2,1]<stderr>:z[7,1]<stderr>:");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 1);
  EXPECT_EQ(t->text, "ddp-train: warning: resuming x with [y] [2,1]<stderr>:z");  // another job's text is kept
  EXPECT_TRUE(d.finish().empty());
}

// Pieces of several ranks' lines in one of mpirun's lines: each rank's piece waits for the rest of its line.
TEST(MpiOutput, PiecesOfSeveralRanksStayWithTheirRank) {
  MpiLineDemux d;
  auto t = d.feed("[5,0]<stdout>:partial-0[5,1]<stdout>:partial-1[5,2]<stdout>:partial-2[5,0]<stdout>: line-0");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 0);
  EXPECT_EQ(t->text, "partial-0 line-0");
  t = d.feed("[5,1]<stdout>: line-1");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 1);
  EXPECT_EQ(t->text, "partial-1 line-1");
  // One rank's stdout and stderr are apart too.
  t = d.feed("[5,2]<stderr>:err-2[5,0]<stdout>:tail-0[5,2]<stderr>: more");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->rank, 2);
  EXPECT_TRUE(t->is_stderr);
  EXPECT_EQ(t->text, "err-2 more");
  const std::vector<TaggedLine> rest = d.finish();  // mpirun ended: the unfinished lines
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].rank, 0);
  EXPECT_EQ(rest[0].text, "tail-0");
  EXPECT_EQ(rest[1].rank, 2);
  EXPECT_FALSE(rest[1].is_stderr);
  EXPECT_EQ(rest[1].text, "partial-2");
  EXPECT_TRUE(d.finish().empty());
}

TEST(MpiOutput, FailureFromExitCodeBlock) {
  MpiFailureScanner s;
  for (const char* l : {"--------------------------------------------------------------------------",
                        "Primary job  terminated normally, but 1 process returned",
                        "mpirun detected that one or more processes exited with non-zero status, thus causing",
                        "the job to be terminated. The first process to do so was:", "",
                        "  Process name: [[31146,1],1]", "  Exit code:    3"})
    s.feed(l);
  ASSERT_TRUE(s.failure().has_value());
  EXPECT_EQ(s.failure()->rank, 1);
  EXPECT_EQ(s.failure()->exit_code, 3);
  EXPECT_EQ(s.failure()->signal, 0);
}

TEST(MpiOutput, FailureFromSignalMessage) {
  MpiFailureScanner s;
  s.feed("mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).");
  ASSERT_TRUE(s.failure().has_value());
  EXPECT_EQ(s.failure()->rank, 2);
  EXPECT_EQ(s.failure()->signal, 9);
  EXPECT_EQ(s.failure()->pid, -1);
  s.feed("  Process name: [[1,1],0]");  // later messages do not replace the first failure
  s.feed("  Exit code:    4");
  EXPECT_EQ(s.failure()->rank, 2);
}

TEST(MpiOutput, RankOnlyMessage) {
  MpiFailureScanner s;
  EXPECT_FALSE(s.failure().has_value());
  s.feed("mpirun has exited due to process rank 1 with PID 4242 on");
  ASSERT_TRUE(s.failure().has_value());
  EXPECT_EQ(s.failure()->rank, 1);
  EXPECT_EQ(s.failure()->pid, 4242);
  EXPECT_EQ(s.failure()->exit_code, -1);
}

TEST(MpirunCommand, LineForEachRankAndOption) {
  Options o;
  o.nproc_per_node = 3;
  o.program_args = {"--x", "y"};
  const LaunchBackend mpi{Backend::kMpi, Backend::kAuto, "", ""};
  std::vector<std::string> argv = build_mpirun_argv(o, mpi, "/usr/bin/mpirun", "/bin/prog", true);
  std::vector<std::string> expected = {
      "/usr/bin/mpirun", "-np", "3", "--oversubscribe", "--bind-to", "none", "--tag-output", "--allow-run-as-root"};
  for (const char* var :
       {"OMP_NUM_THREADS", "DDP_BACKEND", "DDP_LAUNCHER", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "DDP_HEARTBEAT_TIMEOUT", "DDP_EXIT_LINGER", "TORCHELASTIC_ERROR_FILE", "DDP_TTY",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "ROLE_NAME",
        "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE"}) {
    expected.push_back("-x");
    expected.push_back(var);
  }
  for (const char* a : {"/bin/prog", "--x", "y"}) expected.push_back(a);
  EXPECT_EQ(argv, expected);
  o.timeout_s = 60;  // DDP_TIMEOUT only when --timeout was given
  argv = build_mpirun_argv(o, mpi, "/usr/bin/mpirun", "/bin/prog", true);
  expected.insert(std::find(expected.begin(), expected.end(), "TORCHELASTIC_ERROR_FILE") - 1, {"-x", "DDP_TIMEOUT"});
  EXPECT_EQ(argv, expected);
  argv = build_mpirun_argv(o, mpi, "mpirun", "/bin/prog", false);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--allow-run-as-root"), 0);
}

// Every variable ddprun gives a rank (or mpirun) is declared in the launcher's contract as ddprun's.
TEST(RankEnv, EveryVariableSetIsDeclaredAsDdprunsOwn) {
  namespace le = ddp::launch_env;
  Options o;
  o.timeout_s = 60;
  o.rdzv_timeout_s = 90;
  Attempt a = attempt_at(o, 4000);
  a.backend = {Backend::kGloo, Backend::kNccl, "auto: 1 GPU on this node", ""};
  a.restart_count = 1;
  std::vector<std::string> names;
  for (const auto& kv : rank_env_vars(o, a, {}, 2, 0)) names.push_back(kv.first);
  for (const auto& kv : elastic_env_vars(o, a)) names.push_back(kv.first);
  const std::vector<std::string> argv = build_mpirun_argv(o, a.backend, "mpirun", "/bin/prog", false);
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "-x") names.push_back(argv[i + 1]);
  EXPECT_NE(std::find(names.begin(), names.end(), "DDP_BACKEND_ON_GPU"), names.end());
  EXPECT_GE(names.size(), 40u);
  for (const std::string& name : names) {
    const le::EnvVar* v = le::find(name);
    ASSERT_NE(v, nullptr) << name << " is not declared in include/ddp/dist/launch_env.h";
    EXPECT_TRUE(v->set_by & le::kDdprun) << name << " is not declared as set by ddprun";
  }
}

TEST(RankEnv, VariablesOfEachRank) {
  Options o;
  o.nproc_per_node = 4;
  o.nnodes = 3;
  o.node_rank = 2;
  o.master_addr = "10.1.2.3";
  const Attempt a = attempt_at(o, 4000);  // gloo
  std::vector<std::string> base = {"PATH=/bin", "RANK=99", "OTHER=1"};
  std::vector<std::string> env = merge_env(base, rank_env_vars(o, a, base, 16, 3));
  std::vector<std::string> expected = {"PATH=/bin",
                                       "OTHER=1",
                                       "RANK=11",
                                       "LOCAL_RANK=3",
                                       "WORLD_SIZE=12",
                                       "LOCAL_WORLD_SIZE=4",
                                       "GROUP_RANK=2",
                                       "MASTER_ADDR=10.1.2.3",
                                       "MASTER_PORT=4000",
                                       "OMP_NUM_THREADS=4",
                                       "DDP_BACKEND=gloo",
                                       "DDP_LAUNCHER=ddprun",
                                       "TORCHELASTIC_RUN_ID=none-10.1.2.3:4000",
                                       "DDP_HEARTBEAT_TIMEOUT=30"};
  EXPECT_EQ(env, expected);
  o.timeout_s = 7.5;
  o.rdzv_timeout_s = 900;
  o.heartbeat_timeout_s = 0;
  env = merge_env(base, rank_env_vars(o, a, base, 16, 3));
  expected.back() = "DDP_HEARTBEAT_TIMEOUT=0";
  expected.push_back("DDP_TIMEOUT=7.5");
  expected.push_back("DDP_RDZV_TIMEOUT=900");
  EXPECT_EQ(env, expected);
}

TEST(RankEnv, OmpThreadsKeptAndAutoBackendNotExported) {
  Options o;
  o.nproc_per_node = 2;
  std::vector<std::string> base = {"OMP_NUM_THREADS=7", "DDP_BACKEND=mpi"};
  Attempt a = attempt_at(o, 29500);
  a.backend.backend = Backend::kAuto;  // as ddp::spawn's --backend auto
  std::vector<std::string> env = merge_env(base, rank_env_vars(o, a, base, 16, 1));
  std::string value;
  ASSERT_TRUE(find_env(env, "OMP_NUM_THREADS", &value));
  EXPECT_EQ(value, "7");
  ASSERT_TRUE(find_env(env, "DDP_BACKEND", &value));  // auto: the inherited value stays
  EXPECT_EQ(value, "mpi");
  EXPECT_EQ(std::count(env.begin(), env.end(), "OMP_NUM_THREADS=7"), 1);
}

TEST(RankEnv, DefaultOmpThreads) {
  EXPECT_EQ(default_omp_threads(8, 3), 2);
  EXPECT_EQ(default_omp_threads(2, 4), 1);
  EXPECT_EQ(default_omp_threads(16, 1), 16);
}

TEST(RankEnv, MergeRemoves) {
  std::vector<std::string> env = merge_env({"RANK=1", "RANKX=2", "LOCAL_RANK=0"}, {{"A", "b"}}, {"RANK", "LOCAL_RANK"});
  EXPECT_EQ(env, (std::vector<std::string>{"RANKX=2", "A=b"}));
}

TEST(ProgramLookup, SearchesPathLikeExecvp) {
  char dir_template[] = "/tmp/ddprun_lookup_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string exe = dir + "/tool", plain = dir + "/data";
  std::ofstream(exe) << "#!/bin/sh\n";
  std::ofstream(plain) << "x";
  chmod(exe.c_str(), 0755);
  chmod(plain.c_str(), 0644);

  ProgramLookup r = find_program("tool", ("/nonexistent:" + dir).c_str());
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.path, exe);
  r = find_program("no_such_tool_ddprun", ("/nonexistent:" + dir).c_str());
  EXPECT_FALSE(r.found);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.error, "program 'no_such_tool_ddprun' not found in PATH");
  r = find_program(exe, nullptr);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.path, exe);
  r = find_program(dir + "/missing", nullptr);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.error, "cannot run program '" + dir + "/missing': No such file or directory");
  r = find_program(dir, nullptr);
  EXPECT_EQ(r.exit_code, 126);
  EXPECT_EQ(r.error, "cannot run program '" + dir + "': Is a directory");
  if (geteuid() != 0) {  // root may execute anything
    r = find_program(plain, nullptr);
    EXPECT_EQ(r.exit_code, 126);
  }
  unlink(exe.c_str());
  unlink(plain.c_str());
  rmdir(dir.c_str());
}

TEST(NetCheck, DetectsPortInUse) {
  ddprun_test::ListeningSocket listening;
  const int port = listening.port();
  EXPECT_EQ(check_port("127.0.0.1", port).result, PortCheck::kInUse);
  listening.close();
  EXPECT_EQ(check_port("127.0.0.1", port).result, PortCheck::kFree);
  // TEST-NET-1 (RFC 5737) is never an address of this machine.
  EXPECT_EQ(check_port("192.0.2.1", port).result, PortCheck::kNotLocal);
  EXPECT_EQ(check_port("no-such-host.invalid", port).result, PortCheck::kUnresolved);
}

TEST(NetCheck, PicksFreePort) {
  std::string error;
  int port = pick_free_port(&error);
  ASSERT_GT(port, 0) << error;
  EXPECT_EQ(check_port("127.0.0.1", port).result, PortCheck::kFree);
}

TEST(Signals, NamesAndStatuses) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  int exited = 0, killed = 0;
  pid_t a = fork();
  if (a == 0) _exit(3);
  waitpid(a, &exited, 0);
  pid_t b = fork();
  if (b == 0) {
    raise(SIGKILL);
    _exit(0);
  }
  waitpid(b, &killed, 0);
  EXPECT_EQ(describe_wait_status(exited), "exit code 3");
  EXPECT_EQ(exit_code_of_wait_status(exited), 3);
  EXPECT_EQ(describe_wait_status(killed), "signal 9 (SIGKILL)");
  EXPECT_EQ(exit_code_of_wait_status(killed), 137);
}

TEST(Summary, FormatsFailure) {
  Summary s;
  s.has_failure = true;
  s.failure.rank = 5;
  s.failure.local_rank = 1;
  s.failure.pid = 1234;
  s.failure.signal = 9;
  s.failure.stderr_tail = {"oops"};
  s.stop_signal = SIGTERM;
  s.stopped_ranks = {4, 6};
  s.killed_ranks = {6};
  s.grace_s = 1.5;
  s.exit_code = 137;
  std::vector<std::string> expected = {
      "=============== failure summary ===============",
      "first failed rank: rank 5 (local rank 1, pid 1234) was killed by signal 9 (SIGKILL)",
      "last 1 stderr line(s) of rank 5:",
      "  | oops",
      "stopped rank(s) 4, 6 with SIGTERM",
      "killed rank(s) 6 with SIGKILL after the 1.5 s grace period",
      "exiting with code 137"};
  EXPECT_EQ(format_summary(s), expected);
}

TEST(Elastic, AgentVariables) {
  Options o;
  o.nproc_per_node = 3;
  o.nnodes = 2;
  o.max_restarts = 4;
  o.rdzv_id = "job1";
  o.role = "trainer";
  const std::vector<std::pair<std::string, std::string>> expected = {{"TORCHELASTIC_RESTART_COUNT", "2"},
                                                                     {"TORCHELASTIC_MAX_RESTARTS", "4"},
                                                                     {"ROLE_NAME", "trainer"},
                                                                     {"ROLE_WORLD_SIZE", "6"},
                                                                     {"GROUP_WORLD_SIZE", "2"}};
  Attempt a = attempt_at(o, 29500);
  a.restart_count = 2;
  EXPECT_EQ(elastic_env_vars(o, a), expected);  // TORCHELASTIC_RUN_ID is among every rank's (rank_env_vars)
  const auto node = rank_env_vars(o, a, {}, 16, 0);
  EXPECT_NE(
      std::find(node.begin(), node.end(), std::make_pair(std::string("TORCHELASTIC_RUN_ID"), std::string("job1"))),
      node.end());
}

TEST(Elastic, SummaryLines) {
  Options o;
  Attempt a;
  EXPECT_EQ(restart_line(o, a, false), "");  // --max-restarts 0: the summary ends as before
  EXPECT_EQ(restarts_note(o, a, 0), "");
  EXPECT_EQ(restarts_note(o, a, SIGTERM), "");
  o.max_restarts = 3;
  EXPECT_EQ(restart_line(o, a, false), "restarting every rank (restart 1 of 3, --max-restarts 3)");
  EXPECT_EQ(restart_line(o, a, true), "");
  EXPECT_EQ(restarts_note(o, a, 0), "");
  EXPECT_EQ(restarts_note(o, a, SIGINT),
            "not restarting: ddprun received SIGINT (the job is being stopped; 0 of 3 restarts used)");
  a.restart_count = 3;
  EXPECT_EQ(restart_line(o, a, false), "");
  EXPECT_EQ(restarts_note(o, a, 0), "failed after 3 restarts (--max-restarts 3): restarts exhausted");
}

TEST(Elastic, RunAttemptsStopsOnSuccessSignalOrExhaustion) {
  Options o;
  o.standalone = true;
  o.max_restarts = 2;
  std::vector<int> seen;
  // Fails twice, then succeeds: three attempts with counts 0, 1, 2.
  EXPECT_EQ(run_attempts(o, attempt_at(o, 1234),
                         [&](const Attempt& a) {
                           seen.push_back(a.restart_count);
                           EXPECT_GT(a.place.master_port, 0);
                           return AttemptOutcome{a.restart_count < 2 ? 7 : 0, false};
                         }),
            0);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  seen.clear();
  EXPECT_EQ(run_attempts(o, attempt_at(o, 1234),
                         [&](const Attempt& a) {
                           seen.push_back(a.restart_count);
                           return AttemptOutcome{9, false};
                         }),
            9);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  seen.clear();
  EXPECT_EQ(run_attempts(o, attempt_at(o, 1234),
                         [&](const Attempt& a) {
                           seen.push_back(a.restart_count);
                           return AttemptOutcome{143, true};  // ddprun got SIGTERM: never restarted
                         }),
            143);
  EXPECT_EQ(seen, (std::vector<int>{0}));
}
