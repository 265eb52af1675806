// ddp::spawn (include/ddp/spawn.h): the parent launches the ranks with
// ddprun's local launch (tools/ddprun/launch/local_launch.h); a rank runs fn.
#include "ddp/spawn.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "cli/options.h"
#include "ddp/dist/error_file.h"
#include "ddp/dist/launch_env.h"
#include "launch/elastic.h"
#include "launch/local_launch.h"
#include "launch/net_check.h"
#include "launch/rank_env.h"

namespace ddp {
namespace {

namespace le = launch_env;
constexpr const char* kMarker = le::kSpawnChild.name;  // "<k>": a rank of the k-th spawn call

std::atomic<int> g_calls{0};         // spawn()/start_processes() calls so far
std::atomic<bool> g_in_fn{false};    // this rank is running fn
std::atomic<bool> g_running{false};  // this parent supervises ranks now

std::string prefix() { return "ddp::spawn: "; }

int env_int(const le::EnvVar& v, int fallback) { return le::first_valid_count({&v}).value_or(fallback); }

std::string number_text(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

void validate(int nprocs, const std::function<void(int, int)>& fn, const SpawnOptions& opts) {
  if (nprocs < 1) throw InvalidArgument(prefix() + "nprocs must be >= 1 (got " + std::to_string(nprocs) + ")");
  if (!fn) throw InvalidArgument(prefix() + "fn is empty: pass the function each rank runs, fn(rank, world)");
  if (opts.backend == "mpi")
    throw InvalidArgument(prefix() +
                          "backend 'mpi' is not supported: MPI ranks are started by mpirun; launch the "
                          "program with 'ddprun --backend mpi' instead, or use backend 'gloo'");
  if (opts.backend != "gloo" && opts.backend != "auto")
    throw InvalidArgument(prefix() + "unknown backend '" + opts.backend + "': expected 'gloo' or 'auto'");
  if (opts.master_port < 0 || opts.master_port > 65535)
    throw InvalidArgument(prefix() + "master_port must be 0 (a free port) or 1..65535 (got " +
                          std::to_string(opts.master_port) + ")");
  if (opts.master_addr.empty()) throw InvalidArgument(prefix() + "master_addr is empty (e.g. 127.0.0.1)");
  if (!(opts.timeout_s >= 0) || std::isinf(opts.timeout_s))
    throw InvalidArgument(prefix() + "timeout_s must be a number of seconds >= 0 (0: inherited DDP_TIMEOUT), got " +
                          number_text(opts.timeout_s));
  if (!(opts.kill_grace_s >= 0) || std::isinf(opts.kill_grace_s))
    throw InvalidArgument(prefix() + "kill_grace_s must be a number of seconds >= 0, got " +
                          number_text(opts.kill_grace_s));
}

// In a rank: runs fn and ends the process.
[[noreturn]] void run_rank(int nprocs, const std::function<void(int, int)>& fn) {
  const int rank = env_int(le::kRank, -1);
  const int world = env_int(le::kWorldSize, -1);
  int code = 0;
  g_in_fn = true;
  try {
    if (rank < 0 || world != nprocs)
      throw Error(prefix() + "this process was started as a rank of " + std::to_string(world) +
                  " (WORLD_SIZE) with RANK " + std::to_string(rank) + ", but spawn() was called here with nprocs " +
                  std::to_string(nprocs) + ": nprocs must be the same in the parent and in every rank");
    fn(rank, world);
  } catch (const std::exception& e) {
    record_error(e, 1);
    std::fprintf(stderr, "%srank %d: %s\n", prefix().c_str(), rank, e.what());
    code = 1;
  } catch (...) {
    record_error("unknown exception (not derived from std::exception)", 1);
    std::fprintf(stderr, "%srank %d: unknown exception\n", prefix().c_str(), rank);
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

// Counts the call; in a rank, runs fn for its own call (never returns), and
// returns true for an earlier call, which the rank skips.
bool rank_side(int nprocs, const std::function<void(int, int)>& fn) {
  if (g_in_fn)
    throw Error(prefix() + "nested call: spawn() was called inside fn, in rank " +
                std::to_string(env_int(le::kRank, -1)) + "; spawn ranks only from the parent, outside fn");
  const int call = ++g_calls;
  const auto marker = le::text(le::kSpawnChild);
  if (!marker) return false;
  const int target = env_int(le::kSpawnChild, -1);
  if (target < 1)
    throw Error(prefix() + "bad " + kMarker + "='" + *marker + "' in the environment (expected the call number, >= 1)");
  if (call < target) return true;
  if (call > target)
    throw Error(prefix() + "this rank was started for spawn() call " + std::to_string(target) + " but reached call " +
                std::to_string(call) +
                " without it; the calls must happen in the same order "
                "in the parent and the ranks");
  run_rank(nprocs, fn);
}

std::vector<std::string> own_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    argv.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (argv.empty()) throw Error(prefix() + "cannot read this program's arguments from /proc/self/cmdline");
  return argv;
}

std::string own_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    throw Error(prefix() + "cannot find this program (readlink /proc/self/exe: " + std::strerror(errno) +
                "); spawn() needs Linux's /proc");
  return std::string(buf, static_cast<size_t>(n));
}

// What one launch needs, prepared in the calling thread (errors throw here).
struct Launch {
  ddprun::Options options;
  ddprun::Attempt attempt;
  std::string exe;
  ddprun::LocalLaunchExtras extras;
  std::vector<std::string> summary;
  int failed_rank = -1;
  int exit_code = 0;
};

std::unique_ptr<Launch> prepare(int nprocs, const SpawnOptions& opts, int call) {
  auto launch = std::make_unique<Launch>();
  // ddprun's own parsing gives the defaults (job id, inherited heartbeat timeout).
  std::vector<std::string> args = {"--nproc-per-node", std::to_string(nprocs), "--backend",
                                   opts.backend,       "--kill-grace",         number_text(opts.kill_grace_s)};
  if (opts.timeout_s > 0) args.insert(args.end(), {"--timeout", number_text(opts.timeout_s)});
  args.push_back("spawn");
  ddprun::ParseOutcome parsed = ddprun::parse_options(args, ddprun::online_cpu_count());
  if (parsed.kind != ddprun::ParseOutcome::kRun) throw InvalidArgument(prefix() + parsed.error);
  launch->options = parsed.options;
  launch->attempt.backend.backend = parsed.options.backend;  // as given: auto is not exported
  launch->attempt.backend.reason.clear();
  int port = opts.master_port;
  if (port == 0) {
    std::string error;
    port = ddprun::pick_free_port(&error);
    if (port < 0) throw Error(prefix() + "cannot find a free port on 127.0.0.1: " + error);
  } else {
    const std::string where = opts.master_addr + ":" + std::to_string(port);
    ddprun::PortCheck check = ddprun::check_port(opts.master_addr, port);
    if (check.result == ddprun::PortCheck::kInUse)
      throw Error(prefix() + "cannot use master " + where +
                  ": address already in use; pass another master_port "
                  "or 0 for a free one");
    if (check.result == ddprun::PortCheck::kUnresolved)
      throw Error(prefix() + "cannot resolve master_addr '" + opts.master_addr + "': " + check.detail);
  }
  launch->attempt.place = ddprun::static_placement(launch->options, opts.master_addr, port);
  launch->exe = own_exe();
  launch->extras.argv = own_argv();
  launch->extras.env = {{kMarker, std::to_string(call)}, {le::kLauncher.name, "ddp::spawn"}};
  launch->extras.prefix_output = opts.prefix_output;
  launch->extras.summary_prefix = prefix();
  launch->extras.final_line = "throwing ddp::SpawnError, exit code ";
  launch->extras.summary = &launch->summary;
  launch->extras.failed_rank = &launch->failed_rank;
  return launch;
}

// Supervises the ranks to the end; the exit code, 0 when all succeeded.
void supervise(Launch* launch) {
  try {
    launch->exit_code = ddprun::run_local(launch->options, launch->exe, launch->attempt, launch->extras).exit_code;
  } catch (const std::exception& e) {
    launch->exit_code = 1;
    launch->summary = {std::string("the supervision of the ranks failed: ") + e.what()};
  }
  g_running = false;
}

void throw_if_failed(const Launch& launch) {
  if (launch.exit_code != 0) throw SpawnError(launch.failed_rank, launch.exit_code, launch.summary);
}

std::unique_ptr<Launch> begin(int nprocs, const std::function<void(int, int)>& fn, const SpawnOptions& opts,
                              bool* skipped) {
  validate(nprocs, fn, opts);
  *skipped = rank_side(nprocs, fn);
  if (*skipped) return nullptr;
  if (g_running.exchange(true))
    throw Error(prefix() + "another spawn() or start_processes() of this process is still running; join it first");
  try {
    return prepare(nprocs, opts, g_calls.load());
  } catch (...) {
    g_running = false;
    throw;
  }
}

std::string what_text(int rank, int exit_code, const std::vector<std::string>& summary) {
  std::string text = prefix() + (rank >= 0 ? "rank " + std::to_string(rank) + " failed" : std::string("failed")) +
                     " (exit code " + std::to_string(exit_code) + ")";
  for (const std::string& line : summary) text += "\n" + line;
  return text;
}

}  // namespace

SpawnError::SpawnError(int rank, int exit_code, std::vector<std::string> summary)
    : Error(what_text(rank, exit_code, summary)), rank_(rank), exit_code_(exit_code), summary_(std::move(summary)) {}

bool is_spawned_child() { return le::text(le::kSpawnChild).has_value(); }

int spawn(int nprocs, const std::function<void(int rank, int world)>& fn, const SpawnOptions& opts) {
  bool skipped = false;
  std::unique_ptr<Launch> launch = begin(nprocs, fn, opts, &skipped);
  if (skipped) return 0;
  supervise(launch.get());  // in this thread: the ranks' death signal is tied to it
  throw_if_failed(*launch);
  return 0;
}

class SpawnContext::Impl {
 public:
  std::unique_ptr<Launch> launch;  // null: a skipped call
  std::thread thread;
  bool joined = false;
};

SpawnContext::SpawnContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpawnContext::SpawnContext(SpawnContext&&) noexcept = default;
SpawnContext& SpawnContext::operator=(SpawnContext&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->thread.joinable()) impl_->thread.join();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

SpawnContext::~SpawnContext() {
  if (impl_ && impl_->thread.joinable()) impl_->thread.join();
}

void SpawnContext::join() {
  if (!impl_ || impl_->joined) throw Error(prefix() + "join() was already called on this SpawnContext");
  impl_->joined = true;
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->launch) throw_if_failed(*impl_->launch);
}

SpawnContext start_processes(int nprocs, const std::function<void(int rank, int world)>& fn, const SpawnOptions& opts) {
  bool skipped = false;
  auto impl = std::make_unique<SpawnContext::Impl>();
  impl->launch = begin(nprocs, fn, opts, &skipped);
  if (!skipped) {
    // This thread forks the ranks, so their death signal fires when it ends:
    // it lives until every rank has exited.
    Launch* launch = impl->launch.get();
    try {
      impl->thread = std::thread([launch] { supervise(launch); });
    } catch (const std::exception& e) {
      g_running = false;
      throw Error(prefix() + "cannot start the thread that supervises the ranks: " + e.what());
    }
  }
  return SpawnContext(std::move(impl));
}

}  // namespace ddp
