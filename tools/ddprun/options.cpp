// ddprun's command line on CLI11: torchrun's spellings (dashes or underscores,
// "--flag value" or "--flag=value"); the first argument that is not an option
// (or everything after "--") is the program and its arguments.
#include "options.h"
#include "ddp/dist/launch_env.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace ddprun {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::Gloo:
      return "gloo";
    case Backend::Mpi:
      return "mpi";
    case Backend::Nccl:
      return "nccl";
    case Backend::Auto:
      break;
  }
  return "auto";
}

namespace {

// Strict decimal integer: optional '+', digits only, fits in int.
bool parse_int(const std::string& text, int* out) {
  if (text.empty()) return false;
  size_t i = text[0] == '+' ? 1 : 0;
  if (i == text.size()) return false;
  long long value = 0;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
    if (value > INT_MAX) return false;
  }
  *out = static_cast<int>(value);
  return true;
}

// Seconds: digits and at most one '.', finite, at most a day.
bool parse_seconds(const std::string& text, double* out) {
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  double s = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(s) || s < 0 || s > 86400) return false;
  *out = s;
  return true;
}

// Thrown from a value handler; the message is ours, whole.
CLI::ValidationError invalid(const std::string& flag, const std::string& value, const std::string& allowed) {
  return CLI::ValidationError("invalid value '" + value + "' for " + flag + ": " + allowed,
                              CLI::ExitCodes::ValidationError);
}

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

// A flag with one value, handled by `set` (which throws `invalid` on a bad value).
void value_flag(CLI::App& app, const std::string& names, const std::string& help,
                std::function<void(const std::string&)> set) {
  app.add_option_function<std::string>(names, std::move(set), help)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // as argparse: the last one wins
      ->type_name("");
}

// Flags whose mere presence matters for the checks after parsing.
struct Given {
  bool node_rank = false;
  bool master = false;       // --master-addr or --master-port
  std::string rdzv_backend;  // as given, or empty
  bool endpoint = false;
};

// --rdzv-conf: comma-separated KEY=SECONDS of last_call_timeout, join_timeout.
void parse_rdzv_conf(const std::string& v, Options& o) {
  const char* flag = "--rdzv-conf";
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? v.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw invalid(flag, v, "expected KEY=VALUE[,KEY=VALUE] with keys last_call_timeout, join_timeout");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    double s = 0;
    if (key != "last_call_timeout" && key != "join_timeout")
      throw invalid(flag, v, "unknown key '" + key + "' (known: last_call_timeout, join_timeout)");
    if (!parse_seconds(value, &s) || (key == "join_timeout" && s <= 0))
      throw invalid(flag, v,
                    key + " expects seconds" + (key == "join_timeout" ? " > 0" : " >= 0") + ", got '" + value + "'");
    (key == "join_timeout" ? o.join_timeout_s : o.last_call_timeout_s) = s;
  }
}

// Every flag of ddprun, writing into `o`.
void define(CLI::App& app, Options& o, int online_cpus, Given* given) {
  app.description(kDescription);
  app.footer(kFooter);
  app.formatter(std::make_shared<UsageFirst>());
  app.prefix_command();  // the program and its arguments are not ours
  app.set_help_flag("-h,--help", "show this help");
  value_flag(app, "--nproc-per-node,--nproc_per_node",
             "processes on this node: integer >= 1 or 'auto' (= online cores) [default 1]", [&o, online_cpus](auto& v) {
               const char* flag = "--nproc-per-node";
               if (v == "auto") {
                 o.nproc_per_node = online_cpus > 0 ? online_cpus : 1;
                 return;
               }
               int n = 0;
               if (!parse_int(v, &n) || n < 1) throw invalid(flag, v, "expected an integer >= 1 or 'auto'");
               o.nproc_per_node = n;
             });
  value_flag(app, "--nnodes", "number of nodes N, or MIN:MAX for an elastic job (--rdzv-backend c10d) [default 1]",
             [&o](auto& v) {
               const char* flag = "--nnodes";
               size_t colon = v.find(':');
               int lo = 0, hi = 0;
               if (colon == std::string::npos) {
                 if (!parse_int(v, &lo) || lo < 1) throw invalid(flag, v, "expected an integer >= 1 or MIN:MAX");
                 hi = lo;
               } else if (!parse_int(v.substr(0, colon), &lo) || !parse_int(v.substr(colon + 1), &hi)) {
                 throw invalid(flag, v, "expected MIN:MAX with integers 1 <= MIN <= MAX");
               }
               if (lo < 1) throw invalid(flag, v, "MIN must be at least 1");
               if (lo > hi) throw invalid(flag, v, "MIN is larger than MAX");
               o.nnodes_min = lo;
               o.nnodes_max = hi;
               o.nnodes = hi;
             });
  value_flag(app, "--node-rank,--node_rank", "rank of this node, 0 <= G < nnodes (static rendezvous) [default 0]",
             [&o, given](auto& v) {
               int n = 0;
               if (!parse_int(v, &n)) throw invalid("--node-rank", v, "expected an integer >= 0");
               o.node_rank = n;
               given->node_rank = true;
             });
  value_flag(app, "--master-addr,--master_addr", "address of node 0 [default 127.0.0.1]", [&o, given](auto& v) {
    if (v.empty() || v.find_first_of(" \t\n") != std::string::npos)
      throw invalid("--master-addr", v, "expected a host name or IP address");
    o.master_addr = v;
    given->master = true;
  });
  value_flag(app, "--master-port,--master_port", "TCP port on node 0 [default 29500]", [&o, given](auto& v) {
    int n = 0;
    if (!parse_int(v, &n) || n < 1 || n > 65535)
      throw invalid("--master-port", v, "expected a TCP port number 1..65535");
    o.master_port = n;
    given->master = true;
  });
  app.add_flag("--standalone", o.standalone, "single node: use 127.0.0.1 and a free port")->disable_flag_override();
  app.add_flag("--oversubscribe", o.oversubscribe,
               "start more than " + std::to_string(kRanksPerCore) + " ranks per online core (refused without it)")
      ->disable_flag_override();
  value_flag(app, "--backend",
             "gloo | mpi | nccl | auto [default auto]; exported as DDP_BACKEND. 'mpi' launches the ranks through "
             "mpirun. auto: on a node with GPUs, gloo's launch, and each rank on a GPU takes nccl; else mpi on "
             "one node when mpirun is found and the program links ddp, else gloo (or an inherited DDP_BACKEND); "
             "the choice is printed first",
             [&o](auto& v) {
               if (v == "auto")
                 o.backend = Backend::Auto;
               else if (v == "gloo")
                 o.backend = Backend::Gloo;
               else if (v == "mpi")
                 o.backend = Backend::Mpi;
               else if (v == "nccl")
                 o.backend = Backend::Nccl;
               else
                 throw invalid("--backend", v, "expected one of gloo, mpi, nccl, auto");
             });
  value_flag(app, "--kill-grace,--kill_grace", "seconds between SIGTERM and SIGKILL when stopping ranks [default 5]",
             [&o](auto& v) {
               if (!parse_seconds(v, &o.kill_grace_s))
                 throw invalid("--kill-grace", v, "expected a number of seconds >= 0 (e.g. 5 or 0.5)");
             });
  value_flag(app, "--timeout",
             "seconds a rank waits in rendezvous or a collective before failing; exported as DDP_TIMEOUT "
             "[default: the ranks' own, 600]",
             [&o](auto& v) {
               double s = 0;
               if (!parse_seconds(v, &s) || s <= 0)
                 throw invalid("--timeout", v, "expected a number of seconds > 0 (e.g. 60 or 0.5)");
               o.timeout = v;
             });
  value_flag(app, "--rdzv-timeout,--rdzv_timeout",
             "seconds a rank waits for rank 0's store to answer (first contact: a wrong --master-addr fails "
             "then); exported as DDP_RDZV_TIMEOUT [default: the ranks' own, 120, or --timeout if shorter]",
             [&o](auto& v) {
               double s = 0;
               if (!parse_seconds(v, &s) || s <= 0)
                 throw invalid("--rdzv-timeout", v, "expected a number of seconds > 0 (e.g. 600)");
               o.rdzv_timeout = v;
             });
  value_flag(app, "--heartbeat-timeout,--heartbeat_timeout",
             "seconds after which a rank that stopped answering fails the job: a rank stopped by a signal "
             "(SIGSTOP) for this long is stopped with the others; exported as DDP_HEARTBEAT_TIMEOUT; 0 disables "
             "[default: an inherited DDP_HEARTBEAT_TIMEOUT, else 30]",
             [&o](auto& v) {
               if (!parse_seconds(v, &o.heartbeat_timeout_s))
                 throw invalid("--heartbeat-timeout", v, "expected a number of seconds >= 0 (0 disables; e.g. 30)");
             });
  value_flag(app, "--rdzv-id,--rdzv_id",
             "job id, exported as TORCHELASTIC_RUN_ID; ranks refuse a store of another job [default: random "
             "on one node; none-MASTER_ADDR:MASTER_PORT with --nnodes > 1; none-ENDPOINT with c10d]",
             [&o](auto& v) {
               if (v.empty() || v.find_first_of(" \t\n") != std::string::npos)
                 throw invalid("--rdzv-id", v, "expected a non-empty id without spaces");
               o.rdzv_id = v;
             });
  value_flag(app, "--max-restarts,--max_restarts",
             "start every rank again after a failed attempt, at most this many times; across nodes with "
             "--rdzv-backend c10d [default 0]",
             [&o](auto& v) {
               if (!parse_int(v, &o.max_restarts)) throw invalid("--max-restarts", v, "expected an integer >= 0");
             });
  value_flag(app, "--rdzv-backend,--rdzv_backend",
             "static | c10d: c10d assigns node ranks at a rendezvous each round (elastic, restarts across "
             "nodes) [default c10d with --nnodes MIN:MAX or --rdzv-endpoint, else static]",
             [&o, given](auto& v) {
               if (v == "static")
                 o.rdzv_backend = Rdzv::kStatic;
               else if (v == "c10d")
                 o.rdzv_backend = Rdzv::kC10d;
               else
                 throw invalid("--rdzv-backend", v, "expected static or c10d");
               given->rdzv_backend = v;
             });
  value_flag(app, "--rdzv-endpoint,--rdzv_endpoint",
             "HOST[:PORT] of the c10d rendezvous store, hosted by the agent on HOST [default port 29400]",
             [&o, given](auto& v) {
               const char* flag = "--rdzv-endpoint";
               size_t colon = v.rfind(':');
               std::string host = v.substr(0, colon);
               if (host.empty() || host.find_first_of(" \t\n[]:") != std::string::npos)
                 throw invalid(flag, v, "expected HOST or HOST:PORT (a host name or IPv4 address)");
               int port = 29400;
               if (colon != std::string::npos && (!parse_int(v.substr(colon + 1), &port) || port < 1 || port > 65535))
                 throw invalid(flag, v, "the port must be a number 1..65535");
               o.rdzv_host = host;
               o.rdzv_port = port;
               given->endpoint = true;
             });
  value_flag(app, "--rdzv-conf,--rdzv_conf",
             "c10d rendezvous settings: last_call_timeout=S (a round with >= MIN nodes closes S seconds after "
             "the last join) [1], join_timeout=S (fail when MIN nodes are not there after S seconds) [600]",
             [&o](auto& v) { parse_rdzv_conf(v, o); });
  value_flag(app, "--monitor-interval,--monitor_interval",
             "seconds between the supervisor's periodic checks of the ranks (exits are seen at once) [default 1]",
             [&o](auto& v) {
               double s = 0;
               if (!parse_seconds(v, &s) || s <= 0 || s > 60)
                 throw invalid("--monitor-interval", v, "expected a number of seconds > 0 and <= 60 (e.g. 0.1)");
               o.monitor_interval_s = s;
             });
  value_flag(app, "--role", "role of the ranks, exported as ROLE_NAME [default default]", [&o](auto& v) {
    if (v.empty() || v.find_first_of(" \t\n=") != std::string::npos)
      throw invalid("--role", v, "expected a non-empty name without spaces or '='");
    o.role = v;
  });
  value_flag(app, "--log-dir,--log_dir",
             "directory for DIR/attempt_<k>/<rank>/stdout.log, stderr.log (see --redirects, --tee) and the "
             "ranks' error files",
             [&o](auto& v) {
               if (v.empty()) throw invalid("--log-dir", v, "expected a directory path");
               o.log_dir = v;
             });
  value_flag(app, "--redirects,-r",
             "0..3: the ranks' stdout (1), stderr (2) or both (3) go to the --log-dir files only [default 0]",
             [&o](auto& v) {
               if (!parse_int(v, &o.redirects) || o.redirects > 3)
                 throw invalid("--redirects", v, "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
             });
  value_flag(app, "--tee,-t",
             "0..3: the ranks' stdout (1), stderr (2) or both (3) go to the --log-dir files and the console "
             "[default 0]",
             [&o](auto& v) {
               if (!parse_int(v, &o.tee) || o.tee > 3)
                 throw invalid("--tee", v, "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
             });
}

// CLI11's own wording for the few errors it finds before our handlers.
std::string explain(const CLI::ParseError& e) {
  const std::string what = e.what();
  if (e.get_name() == "ArgumentMismatch") {
    const auto colon = what.find(':');
    if (what.find("required") != std::string::npos && colon != std::string::npos)
      return "option " + what.substr(0, colon) + " needs a value";
    if (what.find("flag override") != std::string::npos) return "option --standalone takes no value";
  }
  return what;
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
  Given given;
  define(app, out.options, online_cpus, &given);
  // Without --heartbeat-timeout, an inherited DDP_HEARTBEAT_TIMEOUT (a valid one) is kept, for the ranks and for
  // ddprun's own stopped-rank check, as DDP_TIMEOUT is without --timeout.
  namespace le = ddp::launch_env;
  std::string bad_heartbeat_env;  // refused below unless --heartbeat-timeout replaces it
  if (auto env = le::text(le::kHeartbeatTimeout)) {
    bad_heartbeat_env = le::problem(le::kHeartbeatTimeout, *env);
    if (bad_heartbeat_env.empty()) out.options.heartbeat_timeout_s = le::parse_seconds(le::kHeartbeatTimeout, *env);
  }
  // "--flag=" gives the flag an empty value (CLI11 would take the next argument).
  std::vector<std::string> ours = args;
  for (size_t i = 0; i < ours.size(); ++i) {
    const std::string& a = ours[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program from here on
    if (a.size() > 3 && a.compare(0, 2, "--") == 0 && a.back() == '=') {
      ours[i].pop_back();
      ours.insert(ours.begin() + static_cast<long>(i) + 1, "");
      ++i;
    } else if (a.find('=') == std::string::npos && a != "--standalone" && a != "--oversubscribe" && a != "-h" &&
               a != "--help") {
      ++i;  // its value
    }
  }
  try {
    std::vector<std::string> reversed(ours.rbegin(), ours.rend());  // CLI11 consumes from the back
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out.kind = ParseOutcome::kHelp;
    return out;
  } catch (const CLI::ParseError& e) {
    return fail(explain(e));
  }

  if (!bad_heartbeat_env.empty() && app.count("--heartbeat-timeout") == 0)
    return fail("in the environment: " + bad_heartbeat_env + "; unset it or give --heartbeat-timeout");

  // What CLI11 did not take: ["--"] program args..., or an unknown option first.
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest[0] == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest[0].size() >= 2 && rest[0][0] == '-') {
    return fail("unknown option '" + rest[0].substr(0, rest[0].find('=')) + "' (see ddprun --help)");
  }
  if (rest.empty()) return fail("missing program to run (usage: ddprun [options] program [args...])");
  if (rest[0].empty()) return fail("the program name is empty");
  out.options.program = rest[0];
  out.options.program_args.assign(rest.begin() + 1, rest.end());

  Options& o = out.options;
  if (online_cpus > 0 && o.nproc_per_node > kRanksPerCore * online_cpus && !o.oversubscribe)
    return fail("--nproc-per-node " + std::to_string(o.nproc_per_node) + " starts that many ranks on " +
                std::to_string(online_cpus) + " online core(s), more than " + std::to_string(kRanksPerCore) +
                " per core: each would get a sliver of a core and memory of its own; give a smaller number (auto: "
                "one per core), or add --oversubscribe to start them anyway");
  if (given.rdzv_backend.empty() && (o.nnodes_min != o.nnodes_max || given.endpoint)) o.rdzv_backend = Rdzv::kC10d;
  if (o.rdzv_backend == Rdzv::kC10d) {
    const std::string why =
        given.rdzv_backend.empty() ? " (c10d is the default with --nnodes MIN:MAX or --rdzv-endpoint)" : "";
    if (!given.endpoint)
      return fail("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT], the same on every node" + why);
    if (given.node_rank)
      return fail("--node-rank cannot be used with --rdzv-backend c10d: node ranks are assigned at the rendezvous" +
                  why + "; use --rdzv-backend static for fixed node ranks");
    if (given.master)
      return fail(
          "--master-addr/--master-port cannot be used with --rdzv-backend c10d: the rendezvous picks node "
          "rank 0's address and a free port each round" +
          why);
    if (o.standalone) return fail("--standalone cannot be used with --rdzv-backend c10d" + why);
    if (o.backend == Backend::Mpi) return fail("--backend mpi cannot be used with --rdzv-backend c10d" + why);
    if (o.rdzv_id.empty()) o.rdzv_id = "none-" + o.rdzv_host + ":" + std::to_string(o.rdzv_port);
    o.node_rank = 0;  // until the first round
    out.kind = ParseOutcome::kRun;
    if ((o.redirects != 0 || o.tee != 0) && o.log_dir.empty())
      return fail(std::string(o.redirects != 0 ? "--redirects" : "--tee") +
                  " needs --log-dir DIR: the directory the ranks' log files are written to");
    return out;
  }
  if (o.nnodes_min != o.nnodes_max)
    return fail("--nnodes " + std::to_string(o.nnodes_min) + ":" + std::to_string(o.nnodes_max) +
                " (an elastic range) needs --rdzv-backend c10d, not static");
  if (given.endpoint)
    return fail("--rdzv-endpoint needs --rdzv-backend c10d; with static give --master-addr/--master-port");
  if (o.node_rank >= o.nnodes)
    return fail("invalid value '" + std::to_string(o.node_rank) + "' for --node-rank: must be less than --nnodes (" +
                std::to_string(o.nnodes) + ")");
  if (o.standalone && o.nnodes > 1)
    return fail("--standalone runs a single node and cannot be used with --nnodes " + std::to_string(o.nnodes));
  if (o.backend == Backend::Mpi && o.nnodes > 1)
    return fail("--backend mpi supports a single node only (got --nnodes " + std::to_string(o.nnodes) +
                "); for several nodes run mpirun with a hostfile directly");
  if (o.rdzv_id.empty() && o.nnodes == 1) {  // nodes would not agree on a random one
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof(id), "%08x%08x", rd(), rd());
    out.options.rdzv_id = id;
  }
  if (o.max_restarts > 0 && o.nnodes > 1)
    return fail("--max-restarts " + std::to_string(o.max_restarts) + " across nodes (--nnodes " +
                std::to_string(o.nnodes) +
                ") needs --rdzv-backend c10d and --rdzv-endpoint HOST[:PORT]: the static rendezvous has fixed "
                "node ranks and cannot re-rendezvous");
  if ((o.redirects != 0 || o.tee != 0) && o.log_dir.empty())
    return fail(std::string(o.redirects != 0 ? "--redirects" : "--tee") +
                " needs --log-dir DIR: the directory the ranks' log files are written to");
  out.kind = ParseOutcome::kRun;
  return out;
}

std::string usage_text() {
  Options ignored;
  Given given;
  CLI::App app("ddprun", "ddprun");
  define(app, ignored, 1, &given);
  return app.help();
}

}  // namespace ddprun
