// The table of ddprun's flags. Each entry is made by one of the typed makers below, which hold the rule (range,
// choices, forbidden characters) and write the message a refused value gets.
#include "cli/flags.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "ddp/dist/launch_env.h"

namespace ddprun {
namespace le = ddp::launch_env;

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

// ddprun's own seconds: digits and at most one '.', finite, at most a day.
bool parse_seconds(const std::string& text, double* out) {
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  double s = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(s) || s < 0 || s > 86400) return false;
  *out = s;
  return true;
}

using Setter = std::function<void(const std::string&, Options&, int)>;

Flag make(const char* names, const char* fallback, const char* help, Setter set) {
  Flag f;
  f.names = names;
  f.fallback = fallback;
  f.help = help;
  f.set = std::move(set);
  return f;
}

Flag with_note(Flag f, const char* note) {
  f.default_note = note;
  return f;
}

// An integer in [lo, hi]; `expected` replaces the derived "an integer >= lo".
Flag integer(const char* names, int Options::*field, int lo, int hi, const char* fallback, const char* help,
             std::string expected = "") {
  if (expected.empty())
    expected = hi == INT_MAX ? "expected an integer >= " + std::to_string(lo)
                             : "expected an integer " + std::to_string(lo) + ".." + std::to_string(hi);
  return make(names, fallback, help, [=](const std::string& v, Options& o, int) {
    int n = 0;
    if (!parse_int(v, &n) || n < lo || n > hi) throw FlagError{expected};
    o.*field = n;
  });
}

// ddprun's own seconds: digits and at most one '.', in [lo, hi] (lo excluded when `positive`).
Flag seconds(const char* names, double Options::*field, bool positive, double hi, const char* fallback,
             const char* help, const char* example) {
  std::string expected = std::string("expected a number of seconds ") + (positive ? "> 0" : ">= 0");
  if (hi < 86400) expected += " and <= " + le::format_seconds(hi);
  expected += std::string(" (e.g. ") + example + ")";
  return make(names, fallback, help, [=](const std::string& v, Options& o, int) {
    double s = 0;
    if (!parse_seconds(v, &s) || (positive && s <= 0) || s > hi) throw FlagError{expected};
    o.*field = s;
  });
}

// Seconds the ranks read from `var`: the flag takes what the variable takes (launch_env.h's rule), and its help
// names the variable.
template <class Field>
Flag env_seconds(const char* names, Field Options::*field, const le::EnvVar& var, const char* fallback,
                 const char* help) {
  std::string says = std::string(help) + "; exported as " + var.name;
  if (*var.zero_means) says += std::string("; 0 ") + var.zero_means;
  return make(names, fallback, says.c_str(), [field, &var](const std::string& v, Options& o, int) {
    if (!le::problem(var, v).empty() || v.empty()) throw FlagError{"expected " + le::expected(var)};
    o.*field = le::parse_seconds(var, v);
  });
}

// Text without any of `forbidden` (nor empty).
Flag text(const char* names, std::string Options::*field, const char* forbidden, const char* expected,
          const char* fallback, const char* help) {
  return make(names, fallback, help, [=](const std::string& v, Options& o, int) {
    if (v.empty() || v.find_first_of(forbidden) != std::string::npos)
      throw FlagError{std::string("expected ") + expected};
    o.*field = v;
  });
}

// One of `values`, by name.
template <class E>
Flag choice(const char* names, E Options::*field, std::vector<std::pair<std::string, E>> values, const char* fallback,
            const char* help) {
  std::string expected =
      values.size() == 2 ? "expected " + values[0].first + " or " + values[1].first : "expected one of ";
  for (size_t i = 0; values.size() != 2 && i < values.size(); ++i) expected += (i ? ", " : "") + values[i].first;
  return make(names, fallback, help, [=](const std::string& v, Options& o, int) {
    for (const auto& [name, value] : values)
      if (v == name) {
        o.*field = value;
        return;
      }
    throw FlagError{expected};
  });
}

Flag on_off(const char* names, bool Options::*field, std::string help) {
  Flag f = make(names, "", "", [field](const std::string&, Options& o, int) { o.*field = true; });
  f.help = std::move(help);
  f.is_switch = true;
  return f;
}

// --nproc-per-node: N or auto.
void set_nproc(const std::string& v, Options& o, int online_cpus) {
  if (v == "auto") {
    o.nproc_per_node = online_cpus > 0 ? online_cpus : 1;
    return;
  }
  int n = 0;
  if (!parse_int(v, &n) || n < 1) throw FlagError{"expected an integer >= 1 or 'auto'"};
  o.nproc_per_node = n;
}

// --nnodes: N or MIN:MAX.
void set_nnodes(const std::string& v, Options& o, int) {
  size_t colon = v.find(':');
  int lo = 0, hi = 0;
  if (colon == std::string::npos) {
    if (!parse_int(v, &lo) || lo < 1) throw FlagError{"expected an integer >= 1 or MIN:MAX"};
    hi = lo;
  } else if (!parse_int(v.substr(0, colon), &lo) || !parse_int(v.substr(colon + 1), &hi)) {
    throw FlagError{"expected MIN:MAX with integers 1 <= MIN <= MAX"};
  }
  if (lo < 1) throw FlagError{"MIN must be at least 1"};
  if (lo > hi) throw FlagError{"MIN is larger than MAX"};
  o.nnodes_min = lo;
  o.nnodes_max = hi;
  o.nnodes = hi;
}

// --rdzv-endpoint: HOST[:PORT].
void set_endpoint(const std::string& v, Options& o, int) {
  size_t colon = v.rfind(':');
  std::string host = v.substr(0, colon);
  if (host.empty() || host.find_first_of(" \t\n[]:") != std::string::npos)
    throw FlagError{"expected HOST or HOST:PORT (a host name or IPv4 address)"};
  int port = kDefaultRdzvPort;
  if (colon != std::string::npos && (!parse_int(v.substr(colon + 1), &port) || port < 1 || port > 65535))
    throw FlagError{"the port must be a number 1..65535"};
  o.rdzv_host = host;
  o.rdzv_port = port;
}

// --rdzv-conf: comma-separated KEY=SECONDS of last_call_timeout, join_timeout.
void set_rdzv_conf(const std::string& v, Options& o, int) {
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? v.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw FlagError{"expected KEY=VALUE[,KEY=VALUE] with keys last_call_timeout, join_timeout"};
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    double s = 0;
    if (key != "last_call_timeout" && key != "join_timeout")
      throw FlagError{"unknown key '" + key + "' (known: last_call_timeout, join_timeout)"};
    if (!parse_seconds(value, &s) || (key == "join_timeout" && s <= 0))
      throw FlagError{key + " expects seconds" + (key == "join_timeout" ? " > 0" : " >= 0") + ", got '" + value + "'"};
    (key == "join_timeout" ? o.join_timeout_s : o.last_call_timeout_s) = s;
  }
}

std::vector<Flag> declare() {
  const std::string one_line = " \t\n";
  return {
      make("--nproc-per-node,--nproc_per_node", "1", "processes on this node: integer >= 1 or 'auto' (= online cores)",
           set_nproc),
      make("--nnodes", "1", "number of nodes N, or MIN:MAX for an elastic job (--rdzv-backend c10d)", set_nnodes),
      integer("--node-rank,--node_rank", &Options::node_rank, 0, INT_MAX, "0",
              "rank of this node, 0 <= G < nnodes (static rendezvous)"),
      text("--master-addr,--master_addr", &Options::master_addr, " \t\n", "a host name or IP address", "127.0.0.1",
           "address of node 0"),
      integer("--master-port,--master_port", &Options::master_port, 1, 65535, "29500", "TCP port on node 0",
              "expected a TCP port number 1..65535"),
      on_off("--standalone", &Options::standalone, "single node: use 127.0.0.1 and a free port"),
      on_off("--oversubscribe", &Options::oversubscribe,
             "start more than " + std::to_string(kRanksPerCore) + " ranks per online core (refused without it)"),
      choice<Backend>(
          "--backend", &Options::backend,
          {{"gloo", Backend::kGloo}, {"mpi", Backend::kMpi}, {"nccl", Backend::kNccl}, {"auto", Backend::kAuto}},
          "auto",
          "gloo | mpi | nccl | auto; exported as DDP_BACKEND. 'mpi' launches the ranks through mpirun. "
          "auto: on a node with GPUs, gloo's launch, and each rank on a GPU takes nccl; else mpi on one "
          "node when mpirun is found and the program links ddp, else gloo (or an inherited DDP_BACKEND); "
          "the choice is printed first"),
      seconds("--kill-grace,--kill_grace", &Options::kill_grace_s, false, 86400, "5",
              "seconds between SIGTERM and SIGKILL when stopping ranks", "5 or 0.5"),
      with_note(env_seconds("--timeout", &Options::timeout_s, le::kTimeout, "",
                            "seconds a rank waits in rendezvous or a collective before failing"),
                "the ranks' own, 600"),
      with_note(env_seconds("--rdzv-timeout,--rdzv_timeout", &Options::rdzv_timeout_s, le::kRdzvTimeout, "",
                            "seconds a rank waits for rank 0's store to answer (first contact: a wrong --master-addr "
                            "fails then)"),
                "the ranks' own, 120, or --timeout if shorter"),
      with_note(env_seconds("--heartbeat-timeout,--heartbeat_timeout", &Options::heartbeat_timeout_s,
                            le::kHeartbeatTimeout, "30",
                            "seconds after which a rank that stopped answering fails the job: a rank stopped by a "
                            "signal (SIGSTOP) for this long is stopped with the others"),
                "an inherited DDP_HEARTBEAT_TIMEOUT, else 30"),
      with_note(text("--rdzv-id,--rdzv_id", &Options::rdzv_id, " \t\n", "a non-empty id without spaces", "",
                     "job id, exported as TORCHELASTIC_RUN_ID; ranks refuse a store of another job"),
                "random on one node; none-MASTER_ADDR:MASTER_PORT with --nnodes > 1; none-ENDPOINT with c10d"),
      integer("--max-restarts,--max_restarts", &Options::max_restarts, 0, INT_MAX, "0",
              "start every rank again after a failed attempt, at most this many times; across nodes with "
              "--rdzv-backend c10d (with --recovery inplace: replacements, each a restart; across fixed nodes "
              "replacements only)"),
      choice<Recovery>("--recovery", &Options::recovery,
                       {{"restart", Recovery::kRestart}, {"inplace", Recovery::kInplace}}, "restart",
                       "restart | inplace: when a rank is lost, restart stops every rank (see --max-restarts); "
                       "inplace keeps the others running: they rebuild their group among themselves and go on "
                       "(node 0's ddprun hosts their store; gloo; with c10d, nodes that come join the running round)"),
      integer("--min-ranks,--min_ranks", &Options::min_ranks, 1, INT_MAX, "1",
              "--recovery inplace: the fewest ranks the job trains with (Horovod's --min-np): a loss that leaves "
              "fewer running stops the others, as --recovery restart does (they save the committed state first), "
              "and --max-restarts starts every rank again from it; above it, a lost rank is replaced"),
      with_note(choice<Rdzv>("--rdzv-backend,--rdzv_backend", &Options::rdzv_backend,
                             {{"static", Rdzv::kStatic}, {"c10d", Rdzv::kC10d}}, "static",
                             "static | c10d: c10d assigns node ranks at a rendezvous each round (elastic, restarts "
                             "across nodes)"),
                "c10d with --nnodes MIN:MAX or --rdzv-endpoint, else static"),
      make("--rdzv-endpoint,--rdzv_endpoint", "",
           "HOST[:PORT] of the c10d rendezvous store, hosted by the agent on HOST (PORT: 29400 when not given)",
           set_endpoint),
      make("--rdzv-conf,--rdzv_conf", "last_call_timeout=1,join_timeout=600",
           "c10d rendezvous settings: last_call_timeout=S (a round with >= MIN nodes closes S seconds after the last "
           "join), join_timeout=S (fail when MIN nodes are not there after S seconds)",
           set_rdzv_conf),
      seconds("--monitor-interval,--monitor_interval", &Options::monitor_interval_s, true, 60, "1",
              "seconds between the supervisor's periodic checks of the ranks (exits are seen at once)", "0.1"),
      text("--role", &Options::role, " \t\n=", "a non-empty name without spaces or '='", "default",
           "role of the ranks, exported as ROLE_NAME"),
      text("--log-dir,--log_dir", &Options::log_dir, "", "a directory path", "",
           "directory for DIR/attempt_<k>/<rank>/stdout.log, stderr.log (see --redirects, --tee) and the ranks' error "
           "files"),
      integer("--redirects,-r", &Options::redirects, 0, 3, "0",
              "0..3: the ranks' stdout (1), stderr (2) or both (3) go to the --log-dir files only",
              "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"),
      integer("--tee,-t", &Options::tee, 0, 3, "0",
              "0..3: the ranks' stdout (1), stderr (2) or both (3) go to the --log-dir files and the console",
              "expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"),
  };
}

}  // namespace

std::string Flag::help_line() const {
  const std::string& shown = default_note.empty() ? fallback : default_note;
  return shown.empty() ? help : help + " [default " + shown + "]";
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = declare();
  return table;
}

const Flag* find_flag(const std::string& name) {
  for (const Flag& f : flags())
    if (("," + f.names + ",").find("," + name + ",") != std::string::npos) return &f;
  return nullptr;
}

Options::Options() {
  for (const Flag& f : flags())
    if (!f.fallback.empty()) f.set(f.fallback, *this, 1);
}

}  // namespace ddprun
