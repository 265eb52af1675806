#include "options.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>

namespace ddprun {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::Gloo: return "gloo";
    case Backend::Mpi: return "mpi";
    case Backend::Auto: break;
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

std::string invalid(const std::string& flag, const std::string& value, const std::string& allowed) {
  return "invalid value '" + value + "' for " + flag + ": " + allowed;
}

// A flag handler returns an error message, or "" on success.
using Handler = std::function<std::string(const std::string& flag, const std::string& value, Options&)>;

struct FlagSpec {
  std::vector<std::string> names;
  bool takes_value;
  Handler handler;
};

std::vector<FlagSpec> make_flags(int online_cpus) {
  std::vector<FlagSpec> flags;
  flags.push_back({{"--nproc-per-node", "--nproc_per_node"}, true,
                   [online_cpus](const std::string& flag, const std::string& v, Options& o) {
                     if (v == "auto") {
                       o.nproc_per_node = online_cpus > 0 ? online_cpus : 1;
                       return std::string();
                     }
                     int n = 0;
                     if (!parse_int(v, &n) || n < 1)
                       return invalid(flag, v, "expected an integer >= 1 or 'auto'");
                     o.nproc_per_node = n;
                     return std::string();
                   }});
  flags.push_back({{"--nnodes"}, true, [](const std::string& flag, const std::string& v, Options& o) {
                     size_t colon = v.find(':');
                     if (colon != std::string::npos) {
                       int lo = 0, hi = 0;
                       if (parse_int(v.substr(0, colon), &lo) && parse_int(v.substr(colon + 1), &hi) &&
                           lo == hi && lo >= 1) {
                         o.nnodes = lo;  // "N:N" is a fixed size, same as "N"
                         return std::string();
                       }
                       return invalid(flag, v,
                                      "elastic ranges (MIN:MAX) are not supported; give a fixed number "
                                      "of nodes >= 1");
                     }
                     int n = 0;
                     if (!parse_int(v, &n) || n < 1) return invalid(flag, v, "expected an integer >= 1");
                     o.nnodes = n;
                     return std::string();
                   }});
  flags.push_back({{"--node-rank", "--node_rank"}, true,
                   [](const std::string& flag, const std::string& v, Options& o) {
                     int n = 0;
                     if (!parse_int(v, &n)) return invalid(flag, v, "expected an integer >= 0");
                     o.node_rank = n;
                     return std::string();
                   }});
  flags.push_back({{"--master-addr", "--master_addr"}, true,
                   [](const std::string& flag, const std::string& v, Options& o) {
                     if (v.empty() || v.find_first_of(" \t\n") != std::string::npos)
                       return invalid(flag, v, "expected a host name or IP address");
                     o.master_addr = v;
                     return std::string();
                   }});
  flags.push_back({{"--master-port", "--master_port"}, true,
                   [](const std::string& flag, const std::string& v, Options& o) {
                     int n = 0;
                     if (!parse_int(v, &n) || n < 1 || n > 65535)
                       return invalid(flag, v, "expected a TCP port number 1..65535");
                     o.master_port = n;
                     return std::string();
                   }});
  flags.push_back({{"--standalone"}, false, [](const std::string&, const std::string&, Options& o) {
                     o.standalone = true;
                     return std::string();
                   }});
  flags.push_back({{"--backend"}, true, [](const std::string& flag, const std::string& v, Options& o) {
                     if (v == "auto") o.backend = Backend::Auto;
                     else if (v == "gloo") o.backend = Backend::Gloo;
                     else if (v == "mpi") o.backend = Backend::Mpi;
                     else return invalid(flag, v, "expected one of gloo, mpi, auto");
                     return std::string();
                   }});
  flags.push_back({{"--kill-grace", "--kill_grace"}, true,
                   [](const std::string& flag, const std::string& v, Options& o) {
                     const std::string allowed = "expected a number of seconds >= 0 (e.g. 5 or 0.5)";
                     if (v.empty() || v.find_first_not_of("0123456789.") != std::string::npos)
                       return invalid(flag, v, allowed);
                     errno = 0;
                     char* end = nullptr;
                     double s = std::strtod(v.c_str(), &end);
                     if (errno != 0 || end != v.c_str() + v.size() || !std::isfinite(s) || s < 0 ||
                         s > 86400)
                       return invalid(flag, v, allowed);
                     o.kill_grace_s = s;
                     return std::string();
                   }});
  return flags;
}

}  // namespace

ParseOutcome parse_options(const std::vector<std::string>& args, int online_cpus) {
  ParseOutcome out;
  const std::vector<FlagSpec> flags = make_flags(online_cpus);
  auto fail = [&out](std::string message) {
    out.kind = ParseOutcome::kError;
    out.error = std::move(message);
    return out;
  };

  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      out.kind = ParseOutcome::kHelp;
      return out;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program

    std::string name = arg, value;
    bool has_value = false;
    size_t eq = arg.find('=');
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags)
      for (const std::string& n : f.names)
        if (n == name) spec = &f;
    if (spec == nullptr) return fail("unknown option '" + name + "' (see ddprun --help)");

    if (spec->takes_value && !has_value) {
      if (i + 1 >= args.size()) return fail("option " + name + " needs a value");
      value = args[++i];
    } else if (!spec->takes_value && has_value) {
      return fail("option " + name + " takes no value (got '" + value + "')");
    }
    std::string error = spec->handler(name, value, out.options);
    if (!error.empty()) return fail(error);
    ++i;
  }

  if (i >= args.size())
    return fail("missing program to run (usage: ddprun [options] program [args...])");
  if (args[i].empty()) return fail("the program name is empty");
  out.options.program = args[i];
  out.options.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());

  const Options& o = out.options;
  if (o.node_rank >= o.nnodes)
    return fail("invalid value '" + std::to_string(o.node_rank) + "' for --node-rank: must be less than --nnodes (" +
                std::to_string(o.nnodes) + ")");
  if (o.standalone && o.nnodes > 1)
    return fail("--standalone runs a single node and cannot be used with --nnodes " + std::to_string(o.nnodes));
  if (o.backend == Backend::Mpi && o.nnodes > 1)
    return fail("--backend mpi supports a single node only (got --nnodes " + std::to_string(o.nnodes) +
                "); for several nodes run mpirun with a hostfile directly");
  out.kind = ParseOutcome::kRun;
  return out;
}

std::string usage_text() {
  return R"(usage: ddprun [options] [--] program [program args...]

Starts --nproc-per-node copies of program on this node (like torchrun), each
with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, OMP_NUM_THREADS and DDP_LAUNCHER=ddprun in its environment.
Output lines are prefixed with "[rank N] ". If a rank fails, the others are
stopped (SIGTERM, then SIGKILL after --kill-grace seconds) and a summary is
printed on stderr.

options (--flag value and --flag=value; dashes or underscores):
  --nproc-per-node N   processes on this node: integer >= 1 or 'auto' (= online
                       cores) [default 1]
  --nnodes N           number of nodes [default 1]; elastic ranges are not supported
  --node-rank G        rank of this node, 0 <= G < nnodes [default 0]
  --master-addr HOST   address of node 0 [default 127.0.0.1]
  --master-port PORT   TCP port on node 0 [default 29500]
  --standalone         single node: use 127.0.0.1 and a free port
  --backend B          gloo | mpi | auto [default auto]; exported as DDP_BACKEND
                       unless auto. 'mpi' launches the ranks through mpirun
  --kill-grace S       seconds between SIGTERM and SIGKILL when stopping ranks
                       [default 5]
  -h, --help           show this help

exit status: 0 when every rank exits 0; else the first failed rank's exit code
(128+N if it died from signal N); 128+N when ddprun itself got signal N;
2 for bad options; 126/127 when the program cannot be executed / is not found;
1 for other launch errors (e.g. master port in use).
)";
}

}  // namespace ddprun
