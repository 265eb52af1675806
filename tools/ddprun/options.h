// Command line options of ddprun (a torchrun-like launcher).
#pragma once

#include <string>
#include <vector>

namespace ddprun {

enum class Backend { Auto, Gloo, Mpi, Nccl };  // nccl: launched as gloo's ranks are

// --rdzv-backend: static = fixed --node-rank and --master-addr (no restarts
// across nodes); c10d = the agents meet at --rdzv-endpoint each round (see rendezvous.h).
enum class Rdzv { kStatic, kC10d };

// "auto", "gloo" or "mpi".
const char* backend_name(Backend backend);

// More ranks per online core than this is refused without --oversubscribe: each rank would get a sliver of a
// core (and its own memory), which is a typo more often than a plan.
constexpr int kRanksPerCore = 4;

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  bool oversubscribe = false;
  std::string rdzv_timeout;  // --rdzv-timeout: exported as DDP_RDZV_TIMEOUT; empty when not given
  Backend backend = Backend::Auto;
  // Why `backend` (after main resolved auto, see backend_choice.h); exported as DDP_BACKEND_REASON.
  std::string backend_reason;
  // Auto's launch for a node with GPUs: a rank on a GPU takes this one instead (DDP_BACKEND_ON_GPU); Auto: none.
  Backend backend_on_gpu = Backend::Auto;
  double kill_grace_s = 5.0;
  // --timeout: exported as DDP_TIMEOUT (the ranks' collective/rendezvous
  // timeout); empty when not given (then DDP_TIMEOUT is left as it is).
  std::string timeout;
  // --heartbeat-timeout, exported as DDP_HEARTBEAT_TIMEOUT; ddprun itself fails
  // the job when a rank stays stopped (SIGSTOP) this long. 0 disables.
  double heartbeat_timeout_s = 30.0;
  // Job id exported as TORCHELASTIC_RUN_ID (--rdzv-id); when not given, a random
  // one for a single node, else empty: "none-ADDR:PORT" (nodes must agree).
  std::string rdzv_id;
  // Restarts (torchrun's elastic agent, single node): how often every rank is
  // started again after a failed attempt (see elastic.h).
  int max_restarts = 0;
  // --nnodes MIN:MAX (N = N:N), --rdzv-backend, --rdzv-endpoint HOST[:PORT], --rdzv-conf.
  Rdzv rdzv_backend = Rdzv::kStatic;
  int nnodes_min = 1;
  int nnodes_max = 1;
  std::string rdzv_host;
  int rdzv_port = 29400;
  double last_call_timeout_s = 1.0;  // a round with >= MIN nodes closes this long after the last join
  double join_timeout_s = 600.0;     // a round with < MIN nodes fails after this long
  // Set per round by the c10d rendezvous (0 / -1: nnodes * nproc_per_node / node_rank * nproc_per_node).
  int world_size = 0;
  int first_rank = -1;
  double monitor_interval_s = 1.0;  // the supervisor's periodic check (s)
  std::string role = "default";     // ROLE_NAME
  // --log-dir: per-attempt, per-rank logs and error files; empty: none.
  std::string log_dir;
  int redirects = 0;                      // bits: 1 stdout, 2 stderr -> files only
  int tee = 0;                            // bits: 1 stdout, 2 stderr -> files and console
  std::string program;                    // as given on the command line
  std::vector<std::string> program_args;  // arguments after the program
};

struct ParseOutcome {
  enum Kind { kRun, kHelp, kError };
  Kind kind = kError;
  Options options;
  std::string error;  // one line, without the "ddprun: " prefix (kError only)
};

// Parses the arguments after argv[0]. `online_cpus` is what `auto` resolves
// to for --nproc-per-node. Parsing stops at the first non-option argument or
// after "--"; everything from there on is the program and its arguments.
ParseOutcome parse_options(const std::vector<std::string>& args, int online_cpus);

// Text printed by -h/--help.
std::string usage_text();

}  // namespace ddprun
