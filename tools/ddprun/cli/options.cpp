// ddprun's command line on CLI11: torchrun's spellings (dashes or underscores,
// "--flag value" or "--flag=value"); the first argument that is not an option
// (or everything after "--") is the program and its arguments.
#include "cli/options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <random>

#include "cli/flags.h"
#include "ddp/dist/launch_env.h"
#include "ddp/dist/slurm_env.h"

namespace ddprun {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kGloo:
      return "gloo";
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
    case Backend::kAuto:
      break;
  }
  return "auto";
}

namespace {

const char* const kDescription = R"(Starts --nproc-per-node copies of program on this node (like torchrun), each
with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, OMP_NUM_THREADS and DDP_LAUNCHER=ddprun in its environment.
Output lines are prefixed with "[rank N] ". If a rank fails, the others are
stopped (SIGTERM, then SIGKILL after --kill-grace seconds) and a summary is
printed on stderr.
Options take "--flag value" or "--flag=value", with dashes or underscores.)";

const char* const kFooter = R"(exit status: 0 when every rank exits 0; else the first failed rank's exit code
(128+N if it died from signal N); 128+N when ddprun itself got signal N;
2 for bad options; 126/127 when the program cannot be executed / is not found;
1 for a rank stopped (SIGSTOP) longer than --heartbeat-timeout and for other
launch errors (e.g. master port in use). With --max-restarts: 0 if an attempt
succeeded, else the last attempt's code (exit 75, preempted, counts as a
restart; a signal to ddprun is never restarted).)";

// CLI11's help with the usage line first, naming what follows the options, then the description.
class UsageFirst : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App*) const override { return ""; }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string line = CLI::Formatter::make_usage(app, std::move(name));
    line.pop_back();  // its newline
    return line + " [--] program [program args...]\n\n" + app->get_description() + "\n";
  }
};

// Every flag of the table, writing into `o`.
void define(CLI::App& app, Options& o, int online_cpus) {
  app.description(kDescription);
  app.footer(kFooter);
  app.formatter(std::make_shared<UsageFirst>());
  app.prefix_command();  // the program and its arguments are not ours
  app.set_help_flag("-h,--help", "show this help");
  for (const Flag& f : flags()) {
    auto set = [&f, &o, online_cpus](const std::string& v) {
      try {
        f.set(v, o, online_cpus);
      } catch (const FlagError& e) {  // the message is ours, whole
        throw CLI::ValidationError("invalid value '" + v + "' for " + f.name() + ": " + e.expected,
                                   CLI::ExitCodes::ValidationError);
      }
    };
    if (f.is_switch) {
      app.add_flag_callback(
             f.names, [set] { set(""); }, f.help_line())
          ->disable_flag_override();
    } else {
      app.add_option_function<std::string>(f.names, set, f.help_line())
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // as argparse: the last one wins
          ->type_name("");
    }
  }
}

// CLI11's own wording for the few errors it finds before our handlers.
std::string explain(const CLI::ParseError& e) {
  const std::string what = e.what();
  if (e.get_name() == "ArgumentMismatch") {
    const auto colon = what.find(':');
    if (what.find("required") != std::string::npos && colon != std::string::npos)
      return "option " + what.substr(0, colon) + " needs a value";
    const auto given = what.find(" was given a disallowed flag override");
    if (given != std::string::npos)
      return "option --" + what.substr(0, given) + " takes no value";  // CLI11: "standalone"
  }
  return what;
}

// "--flag=" gives the flag an empty value (CLI11 would take the next argument); reversed, as CLI11 consumes
// from the back.
std::vector<std::string> cli11_tokens(std::vector<std::string> ours) {
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::string& a = ours[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program from here on
    if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=') {
      ours[i].pop_back();
      ours.insert(ours.begin() + static_cast<long>(i) + 1, "");
      ++i;
    } else if (a.find('=') == std::string::npos && a != "-h" && a != "--help" &&
               !(find_flag(a) != nullptr && find_flag(a)->is_switch)) {
      ++i;  // its value
    }
  }
  return {ours.rbegin(), ours.rend()};
}

// What CLI11 did not take: ["--"] program args..., or an unknown option first. An error, or "".
std::string take_program(std::vector<std::string> rest, Options& o) {
  if (!rest.empty() && rest[0] == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest[0].size() >= 2 && rest[0][0] == '-') {
    return "unknown option '" + rest[0].substr(0, rest[0].find('=')) + "' (see ddprun --help)";
  }
  if (rest.empty()) return "missing program to run (usage: ddprun [options] program [args...])";
  if (rest[0].empty()) return "the program name is empty";
  o.program = rest[0];
  o.program_args.assign(rest.begin() + 1, rest.end());
  return "";
}

// srun ddprun ...: one ddprun per node, an srun task that no launcher placed. The static rendezvous's flags not
// given come from Slurm's variables: the node count and rank, node 0's address, the job's port and id. An error,
// or "".
std::string take_slurm(Options& o, const CLI::App& app) {
  namespace le = ddp::launch_env;
  namespace sl = ddp::slurm;
  const le::EnvFn env = le::process();
  if (!sl::srun_task(env) || app.count("--standalone") + app.count("--rdzv-endpoint") + app.count("--rdzv-backend") > 0)
    return "";
  try {
    if (auto per_node = sl::derive(le::kLocalWorldSize.name, env); per_node && per_node->value != "1")
      return "srun started " + per_node->value + " ddprun on this node (" + per_node->source +
             "): one ddprun per node starts its ranks; run it as 'srun --ntasks-per-node 1 ddprun ...'";
    auto from = [&](const char* flag, const le::EnvVar& v, const std::function<void(const std::string&)>& set) {
      if (app.count(flag) > 0) return;
      const auto d = sl::derive(v.name, env);
      if (!d) return;
      set(d->value);
      o.placement += std::string(o.placement.empty() ? "" : ", ") + flag + " " + d->value + " (" + d->source + ")";
    };
    from("--nnodes", le::kGroupWorldSize,
         [&](const std::string& v) { o.nnodes = o.nnodes_min = o.nnodes_max = std::stoi(v); });
    from("--node-rank", le::kGroupRank, [&](const std::string& v) { o.node_rank = std::stoi(v); });
    from("--master-addr", le::kMasterAddr, [&](const std::string& v) { o.master_addr = v; });
    from("--master-port", le::kMasterPort, [&](const std::string& v) { o.master_port = std::stoi(v); });
    if (auto id = le::text(le::kSlurmJobId, env); id && o.rdzv_id.empty()) {
      o.rdzv_id = *id;
      o.placement += ", --rdzv-id " + *id + " (" + le::kSlurmJobId.name + ")";
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Flags whose presence matters, beyond their values.
struct Given {
  bool node_rank, endpoint, master, rdzv_backend;
};

// --rdzv-backend c10d: the flags it excludes; the job id it defaults to. An error, or "".
std::string check_c10d(Options& o, const Given& given) {
  const std::string why = !given.rdzv_backend ? " (c10d is the default with --nnodes MIN:MAX or --rdzv-endpoint)" : "";
  if (!given.endpoint) return "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT], the same on every node" + why;
  if (given.node_rank)
    return "--node-rank cannot be used with --rdzv-backend c10d: node ranks are assigned at the rendezvous" + why +
           "; use --rdzv-backend static for fixed node ranks";
  if (given.master)
    return "--master-addr/--master-port cannot be used with --rdzv-backend c10d: the rendezvous picks node rank "
           "0's address and a free port each round" +
           why;
  if (o.standalone) return "--standalone cannot be used with --rdzv-backend c10d" + why;
  if (o.backend == Backend::kMpi) return "--backend mpi cannot be used with --rdzv-backend c10d" + why;
  if (o.rdzv_id.empty()) o.rdzv_id = "none-" + o.rdzv_host + ":" + std::to_string(o.rdzv_port);
  o.node_rank = 0;  // until the first round
  return "";
}

// The static rendezvous: fixed nodes; a random job id on one node. An error, or "".
std::string check_static(Options& o, const Given& given) {
  const std::string nnodes = std::to_string(o.nnodes);
  if (o.nnodes_min != o.nnodes_max)
    return "--nnodes " + std::to_string(o.nnodes_min) + ":" + std::to_string(o.nnodes_max) +
           " (an elastic range) needs --rdzv-backend c10d, not static";
  if (given.endpoint) return "--rdzv-endpoint needs --rdzv-backend c10d; with static give --master-addr/--master-port";
  if (o.node_rank >= o.nnodes)
    return "invalid value '" + std::to_string(o.node_rank) + "' for --node-rank: must be less than --nnodes (" +
           nnodes + ")";
  if (o.standalone && o.nnodes > 1) return "--standalone runs a single node and cannot be used with --nnodes " + nnodes;
  if (o.backend == Backend::kMpi && o.nnodes > 1)
    return "--backend mpi supports a single node only (got --nnodes " + nnodes +
           "); for several nodes run mpirun with a hostfile directly";
  if (o.rdzv_id.empty() && o.nnodes == 1) {  // nodes would not agree on a random one
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof(id), "%08x%08x", rd(), rd());
    o.rdzv_id = id;
  }
  if (o.max_restarts > 0 && o.nnodes > 1 && o.recovery != Recovery::kInplace)  // inplace: replacements only
    return "--max-restarts " + std::to_string(o.max_restarts) + " across nodes (--nnodes " + nnodes +
           ") needs --rdzv-backend c10d and --rdzv-endpoint HOST[:PORT]: the static rendezvous has fixed node ranks "
           "and cannot re-rendezvous";
  return "";
}

// The flags checked against each other. An error, or "".
std::string check_together(Options& o, const Given& given, int online_cpus) {
  if (online_cpus > 0 && o.nproc_per_node > kRanksPerCore * online_cpus && !o.oversubscribe)
    return "--nproc-per-node " + std::to_string(o.nproc_per_node) + " starts that many ranks on " +
           std::to_string(online_cpus) + " online core(s), more than " + std::to_string(kRanksPerCore) +
           " per core: each would get a sliver of a core and memory of its own; give a smaller number (auto: one "
           "per core), or add --oversubscribe to start them anyway";
  if (!given.rdzv_backend && (o.nnodes_min != o.nnodes_max || given.endpoint)) o.rdzv_backend = Rdzv::kC10d;
  const std::string error = o.rdzv_backend == Rdzv::kC10d ? check_c10d(o, given) : check_static(o, given);
  if (!error.empty()) return error;
  if (o.recovery == Recovery::kInplace) {
    if (o.min_ranks > 1 && o.nnodes_max > 1)
      return "--min-ranks counts one node's ranks: it cannot be used with --nnodes " +
             (o.nnodes_min == o.nnodes_max ? std::to_string(o.nnodes_max)
                                           : std::to_string(o.nnodes_min) + ":" + std::to_string(o.nnodes_max)) +
             " yet";
    if (o.min_ranks > o.nproc_per_node)
      return "--min-ranks " + std::to_string(o.min_ranks) + " is more than the " + std::to_string(o.nproc_per_node) +
             " rank(s) started (--nproc-per-node); give at most that many";
    if (o.backend == Backend::kMpi || o.backend == Backend::kNccl)
      return std::string("--recovery inplace cannot be used with --backend ") + backend_name(o.backend) +
             (o.backend == Backend::kMpi ? ": OpenMPI's communicators cannot survive a lost rank"
                                         : ": ddp cannot abort NCCL's communicators yet") +
             "; use --backend gloo, or --recovery restart";
  }
  if (o.min_ranks > 1 && o.recovery != Recovery::kInplace)
    return "--min-ranks needs --recovery inplace: with --recovery restart any lost rank stops every rank";
  if ((o.redirects != 0 || o.tee != 0) && o.log_dir.empty())
    return std::string(o.redirects != 0 ? "--redirects" : "--tee") +
           " needs --log-dir DIR: the directory the ranks' log files are written to";
  return "";
}

}  // namespace

ParseOutcome parse_options(const std::vector<std::string>& args, int online_cpus) {
  ParseOutcome out;
  auto fail = [&out](std::string message) {
    out.kind = ParseOutcome::kError;
    out.error = std::move(message);
    return out;
  };
  CLI::App app("ddprun", "ddprun");
  define(app, out.options, online_cpus);
  // Without --heartbeat-timeout, an inherited DDP_HEARTBEAT_TIMEOUT (a valid one) is kept, for the ranks and for
  // ddprun's own stopped-rank check, as DDP_TIMEOUT is without --timeout.
  namespace le = ddp::launch_env;
  std::string bad_heartbeat_env;  // refused below unless --heartbeat-timeout replaces it
  if (auto env = le::text(le::kHeartbeatTimeout)) {
    bad_heartbeat_env = le::problem(le::kHeartbeatTimeout, *env);
    if (bad_heartbeat_env.empty()) out.options.heartbeat_timeout_s = le::parse_seconds(le::kHeartbeatTimeout, *env);
  }
  try {
    app.parse(cli11_tokens(args));
  } catch (const CLI::CallForHelp&) {
    out.kind = ParseOutcome::kHelp;
    return out;
  } catch (const CLI::ParseError& e) {
    return fail(explain(e));
  }
  if (!bad_heartbeat_env.empty() && app.count("--heartbeat-timeout") == 0)
    return fail("in the environment: " + bad_heartbeat_env + "; unset it or give --heartbeat-timeout");
  std::string error = take_program(app.remaining(), out.options);
  if (!error.empty()) return fail(error);
  error = take_slurm(out.options, app);
  if (!error.empty()) return fail(error);
  const Given given{app.count("--node-rank") > 0, app.count("--rdzv-endpoint") > 0,
                    app.count("--master-addr") + app.count("--master-port") > 0, app.count("--rdzv-backend") > 0};
  error = check_together(out.options, given, online_cpus);
  if (!error.empty()) return fail(error);
  out.kind = ParseOutcome::kRun;
  return out;
}

std::string usage_text() {
  Options ignored;
  CLI::App app("ddprun", "ddprun");
  define(app, ignored, 1);
  return app.help();
}

}  // namespace ddprun
