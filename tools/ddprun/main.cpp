// ddprun: starts the ranks of a distributed ddp job on this node (torchrun-like).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/options.h"
#include "ddp/dist/launch_env.h"
#include "dist/timeline_files.h"
#include "launch/attempt.h"
#include "launch/backend_choice.h"
#include "launch/elastic.h"
#include "launch/local_launch.h"
#include "launch/mpi_launch.h"
#include "launch/net_check.h"
#include "launch/program_lookup.h"
#include "launch/rank_env.h"
#include "output/output.h"
#include "rendezvous/c10d_agent.h"
#include "rendezvous/rank_store.h"

using namespace ddprun;

namespace {

// Where the ranks of the static rendezvous meet, after the --standalone / port-in-use checks; nullopt after
// reporting an error.
std::optional<Placement> prepare_placement(const Options& options) {
  if (options.standalone) {
    std::string error;
    int port = pick_free_port(&error);
    if (port < 0) {
      report("--standalone: cannot find a free port on 127.0.0.1: " + error);
      return std::nullopt;
    }
    return static_placement(options, "127.0.0.1", port);
  }
  const Placement given = static_placement(options, options.master_addr, options.master_port);
  if (options.node_rank != 0) return given;
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  PortCheck check = check_port(options.master_addr, options.master_port);
  switch (check.result) {
    case PortCheck::kFree:
    case PortCheck::kNotLocal:
      break;
    case PortCheck::kInUse:
      report("cannot use MASTER_ADDR:MASTER_PORT " + where + ": address already in use; " +
             "pass --master-port with a free port or use --standalone");
      return std::nullopt;
    case PortCheck::kUnresolved:
      report("cannot resolve --master-addr '" + options.master_addr + "': " + check.detail);
      return std::nullopt;
    case PortCheck::kError:
      report("warning: could not check MASTER_ADDR:MASTER_PORT " + where + ": " + check.detail);
      break;
  }
  return given;
}

// DDP_TIMELINE=FILE reached the ranks: join the rank files this node's ranks wrote.
int merge_timeline_at_end(const Options& options, int exit_code) {
  const auto timeline = ddp::launch_env::text(ddp::launch_env::kTimeline);
  if (!timeline) return exit_code;
  const char* path = timeline->c_str();
  std::string error;
  const int world = options.nnodes_max * options.nproc_per_node;  // the most ranks any round had
  const int ranks = ddp::timeline_files::merge(path, world, &error);
  if (ranks < 0)
    report("warning: timeline: " + error);
  else if (ranks > 0)
    report(std::string("timeline: ") + path + " (" + std::to_string(ranks) + " rank(s))");
  return exit_code;
}

// Node 0, several nodes: a node that went silent is lost, with its ranks (told to the rendezvous, if any).
void report_lost_nodes(const std::vector<int>& nodes, const Options& options, const Attempt& attempt) {
  for (int k : nodes) {
    report("node " + std::to_string(k) + "'s ddprun went silent for " + seconds_text(options.heartbeat_timeout_s) +
           " (--heartbeat-timeout): counted lost, with its ranks");
    if (attempt.node_lost) attempt.node_lost(k);
  }
}

// --recovery inplace: this attempt's ranks meet on a store node 0's ddprun hosts, which outlives any of them; each
// rank that fails while others run is marked lost there by its node's ddprun, and the others rebuild their group
// (ddp::Membership).
AttemptOutcome run_inplace(const Options& options, const std::string& exec_path, const Attempt& attempt) {
  std::string error;
  const int node = attempt.place.node_rank;
  // Node 0 hosts it; another node waits for it as long as its ranks would wait for a rendezvous.
  // An operation unanswered for the heartbeat timeout (at least 5 s) means node 0's ddprun or the link to it is gone.
  const double op_timeout_s = std::max(5.0, options.heartbeat_timeout_s > 0 ? options.heartbeat_timeout_s : 30.0);
  auto store = open_rank_store(attempt.place.master_addr, attempt.place.master_port, attempt.place.world_size, node,
                               options.rdzv_timeout_s.value_or(600), op_timeout_s, &error);
  if (!store) {
    report(error);
    return AttemptOutcome(1);
  }
  LocalLaunchExtras extras;
  extras.on_lost = [&](int rank, pid_t pid, const std::string& how) { store->mark_lost(rank, pid, how); };
  extras.replacements = options.max_restarts - attempt.restart_count;  // each replaced rank is a restart
  extras.replacement_env = {{ddp::launch_env::kJoin.name, "1"}};
  extras.min_ranks = options.min_ranks;
  extras.alone_too = options.nnodes_max > 1;  // the other nodes' ranks go on when this node's last one is lost
  if (options.nnodes_max == 1) return run_local(options, exec_path, attempt, extras);
  if (attempt.attached) {
    extras.env = extras.replacement_env;          // a node that came to the running job
  } else if (node > 0 && store->job_running()) {  // the job went on without this node: it comes back
    report("the job is running already (this node comes back after it was lost): its ranks join it");
    extras.env = extras.replacement_env;
  }
  const auto node_ranks = [&] { return attempt.node_ranks ? attempt.node_ranks() : options.nnodes; };
  Attempt watched = attempt;  // each --monitor-interval: another node says it is alive; node 0 looks at them
  watched.external_stop = [&]() -> std::string {
    if (node > 0) {
      if (std::string cut = store->beat(); !cut.empty()) return cut;
    } else {
      report_lost_nodes(store->watch(node_ranks(), options.heartbeat_timeout_s), options, attempt);
    }
    return attempt.external_stop ? attempt.external_stop() : "";
  };
  AttemptOutcome outcome = run_local(options, exec_path, watched, extras);
  if (node > 0) {
    store->done();
    return outcome;
  }
  try {  // the other nodes' ranks may still train: they need the store until they end
    bool told = false;
    for (;;) {
      report_lost_nodes(store->watch(node_ranks(), options.heartbeat_timeout_s), options, attempt);
      if (store->others_running() == 0) break;
      if (!told) report("this node's ranks ended; serving the ranks' store until the other nodes' end");
      told = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception& e) {  // its own store: only a broken process gets here
    report(std::string("warning: stopped serving the ranks' store early: ") + e.what());
  }
  return outcome;
}

}  // namespace

int main(int argc, char** argv) {
  // fds 0-2 must exist, or pipes created later could take their numbers.
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher

  std::vector<std::string> args(argv + 1, argv + argc);
  ParseOutcome parsed = parse_options(args, online_cpu_count());
  if (parsed.kind == ParseOutcome::kHelp) {
    write_all(STDOUT_FILENO, usage_text());
    return 0;
  }
  if (parsed.kind == ParseOutcome::kError) {
    report(parsed.error);
    return 2;
  }
  const Options& options = parsed.options;

  ProgramLookup program = find_program(options.program, std::getenv("PATH"));
  if (!program.found) {
    report(program.error);
    return program.exit_code;
  }

  // --backend auto: resolved here, said on the first line, exported to the ranks.
  const LaunchBackend choice = choose_backend(options, probe_mpi(options, program.path));
  if (!choice.error.empty()) {
    report(choice.error);
    return 2;
  }
  if (options.backend == Backend::kAuto)
    report(std::string("backend ") + backend_name(choice.backend) + " (" + choice.reason + ")");
  if (!options.placement.empty()) report("placed by srun: " + options.placement);
  if (options.recovery == Recovery::kInplace && choice.backend != Backend::kGloo) {
    report(std::string("--recovery inplace needs gloo, and the backend is ") + backend_name(choice.backend) + " (" +
           choice.reason + "); give --backend gloo, or --recovery restart");
    return 2;
  }

  std::string mpirun_path;
  if (choice.backend == Backend::kMpi) {
    ProgramLookup mpirun = find_program("mpirun", std::getenv("PATH"));
    if (!mpirun.found) {
      report(
          "--backend mpi needs 'mpirun' on PATH but it was not found; install OpenMPI "
          "(e.g. apt-get install openmpi-bin) or use --backend gloo");
      return 1;
    }
    mpirun_path = mpirun.path;
  }

  if (options.rdzv_backend == Rdzv::kC10d)
    return merge_timeline_at_end(options, run_c10d(options, choice, [&](const Attempt& attempt) {
                                   if (options.recovery == Recovery::kInplace)
                                     return run_inplace(options, program.path, attempt);
                                   return run_local(options, program.path, attempt);
                                 }));

  Attempt first;
  first.backend = choice;
  if (auto place = prepare_placement(options))
    first.place = *place;
  else
    return 1;
  // In place across fixed nodes, --max-restarts gives replacements only: a node cannot restart the job alone.
  if (options.recovery == Recovery::kInplace && options.nnodes > 1)
    return merge_timeline_at_end(options, run_inplace(options, program.path, first).exit_code);
  return merge_timeline_at_end(options, run_attempts(options, first, [&](const Attempt& attempt) {
                                 if (choice.backend == Backend::kMpi)
                                   return run_mpi(options, mpirun_path, program.path, attempt);
                                 if (options.recovery == Recovery::kInplace)
                                   return run_inplace(options, program.path, attempt);
                                 return run_local(options, program.path, attempt);
                               }));
}
