// Command line options of ddprun (a torchrun-like launcher).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun {

enum class Backend { kAuto, kGloo, kMpi, kNccl };  // nccl: launched as gloo's ranks are

// --rdzv-backend: static = fixed --node-rank and --master-addr (no restarts
// across nodes); c10d = the agents meet at --rdzv-endpoint each round (see rendezvous.h).
enum class Rdzv { kStatic, kC10d };

// --recovery: what a lost rank costs. restart: every rank is stopped (and started again with --max-restarts);
// inplace: ddprun hosts the ranks' store and marks the lost rank there, the survivors rebuild their group and go on
// (ddp::Membership, include/ddp/dist/membership.h).
enum class Recovery { kRestart, kInplace };

// "auto", "gloo", "mpi" or "nccl".
const char* backend_name(Backend backend);

// More ranks per online core than this is refused without --oversubscribe: each rank would get a sliver of a
// core (and its own memory), which is a typo more often than a plan.
constexpr int kRanksPerCore = 4;
constexpr int kDefaultRdzvPort = 29400;  // torchrun's, for --rdzv-endpoint HOST

// What the user asked for on the command line, as given (after parse_options' checks); what the launch resolves
// from it (the backend, where each attempt's ranks are) is in attempt.h. Every field is a flag's, declared with
// its default, rule and help in flags.cpp; a new Options holds every default.
struct Options {
  Options();

  int nproc_per_node{};
  int nnodes{};      // --nnodes N: N; MIN:MAX: MAX
  int nnodes_min{};  // --nnodes MIN:MAX (N = N:N)
  int nnodes_max{};
  int node_rank{};          // static rendezvous; with c10d each round assigns it
  std::string master_addr;  // static rendezvous
  int master_port{};
  bool standalone{};
  bool oversubscribe{};
  Backend backend{};  // as given: kAuto is resolved by backend_choice.h
  double kill_grace_s{};
  std::optional<double> timeout_s;       // --timeout: DDP_TIMEOUT for the ranks; unset: theirs is left as it is
  std::optional<double> rdzv_timeout_s;  // --rdzv-timeout: DDP_RDZV_TIMEOUT; likewise
  // DDP_HEARTBEAT_TIMEOUT for the ranks; ddprun itself fails the job when a rank stays stopped (SIGSTOP) this
  // long. 0 disables.
  double heartbeat_timeout_s{};
  // Job id exported as TORCHELASTIC_RUN_ID (--rdzv-id); when not given, a random
  // one for a single node, else empty: "none-ADDR:PORT" (nodes must agree).
  std::string rdzv_id;
  std::string placement;  // srun ddprun: the flags Slurm's variables gave, for the first line ("" when none)
  // Restarts (torchrun's elastic agent): how often every rank is started again after a failed attempt (elastic.h).
  int max_restarts{};
  Recovery recovery{};
  int min_ranks{};  // --recovery inplace: the fewest ranks running that the job goes on with
  Rdzv rdzv_backend{};
  std::string rdzv_host;  // --rdzv-endpoint HOST[:PORT]
  int rdzv_port = kDefaultRdzvPort;
  double last_call_timeout_s{};           // --rdzv-conf: a round with >= MIN nodes closes this long after the last join
  double join_timeout_s{};                // a round with < MIN nodes fails after this long
  double monitor_interval_s{};            // the supervisor's periodic check (s)
  std::string role;                       // ROLE_NAME
  std::string log_dir;                    // per-attempt, per-rank logs and error files; empty: none
  int redirects{};                        // bits: 1 stdout, 2 stderr -> files only
  int tee{};                              // bits: 1 stdout, 2 stderr -> files and console
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
