// The launcher's contract: every environment variable that passes between ddprun, ddp::spawn, mpirun or Slurm and
// the ranks, or that a user sets to tune ddp, declared once (name, type, range, who sets it, meaning) and read only
// through the readers below, which parse it one way and name it in every error. Torch-free: ddprun links it too.
// docs/launcher.md's table of the ranks' variables is checked against kAll (scripts/check-launch-env.py, a test).
#pragma once
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddp::launch_env {

enum class Type {
  kText,     // any string
  kCount,    // an integer in [min, max]
  kSeconds,  // a finite decimal number of seconds in [min, max] (min_exclusive: > min)
  kChoice,   // one of `choices` ('|'-separated; compared ignoring case)
};

// Who sets a variable (bits).
enum SetBy : unsigned {
  kDdprun = 1,  // ddprun, for every rank it starts (and ddp::spawn, which launches through it)
  kSpawn = 2,   // ddp::spawn only
  kMpirun = 4,  // mpirun (OpenMPI, PMI/PMIx)
  kSlurm = 8,   // Slurm's srun
  kUser = 16,   // the user, to tune or debug (ddprun passes it on)
};

struct EnvVar {
  const char* name = "";
  Type type = Type::kText;
  unsigned set_by = kUser;
  const char* meaning = "";
  double min = 0;
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  const char* choices = "";     // kChoice: "sequencer|waiter"
  const char* zero_means = "";  // kSeconds: what 0 does, for the message ("turns the heartbeat off")

  constexpr EnvVar with_range(double lo, double hi, bool exclusive_lo = false) const {
    EnvVar v = *this;
    v.min = lo;
    v.max = hi;
    v.min_exclusive = exclusive_lo;
    return v;
  }
  constexpr EnvVar with_choices(const char* c) const {
    EnvVar v = *this;
    v.choices = c;
    return v;
  }
  constexpr EnvVar with_zero_means(const char* z) const {
    EnvVar v = *this;
    v.zero_means = z;
    return v;
  }
};

constexpr EnvVar var(const char* name, Type type, unsigned set_by, const char* meaning) {
  EnvVar v;
  v.name = name;
  v.type = type;
  v.set_by = set_by;
  v.meaning = meaning;
  return v;
}

constexpr double kMaxSeconds = 1e7;
constexpr double kMaxCount = 1 << 30;

// --- Where a rank is (torchrun's names; ddprun sets them) ---
inline constexpr EnvVar kRank = var("RANK", Type::kCount, kDdprun, "the rank in the job").with_range(0, kMaxCount);
inline constexpr EnvVar kLocalRank =
    var("LOCAL_RANK", Type::kCount, kDdprun, "the rank on this node").with_range(0, kMaxCount);
inline constexpr EnvVar kWorldSize =
    var("WORLD_SIZE", Type::kCount, kDdprun, "the number of ranks in the job").with_range(0, kMaxCount);
inline constexpr EnvVar kLocalWorldSize =
    var("LOCAL_WORLD_SIZE", Type::kCount, kDdprun, "the number of ranks on this node").with_range(1, kMaxCount);
inline constexpr EnvVar kGroupRank =
    var("GROUP_RANK", Type::kCount, kDdprun, "the rank of this node").with_range(0, kMaxCount);
inline constexpr EnvVar kGroupWorldSize =
    var("GROUP_WORLD_SIZE", Type::kCount, kDdprun, "the number of nodes").with_range(1, kMaxCount);
inline constexpr EnvVar kRoleName = var("ROLE_NAME", Type::kText, kDdprun, "the ranks' role (--role)");
inline constexpr EnvVar kRoleRank =
    var("ROLE_RANK", Type::kCount, kDdprun, "the rank in its role (one role: RANK)").with_range(0, kMaxCount);
inline constexpr EnvVar kRoleWorldSize =
    var("ROLE_WORLD_SIZE", Type::kCount, kDdprun, "the ranks in the role (one role: WORLD_SIZE)")
        .with_range(1, kMaxCount);
inline constexpr EnvVar kMasterAddr = var("MASTER_ADDR", Type::kText, kDdprun, "where rank 0's store listens");
inline constexpr EnvVar kMasterPort =
    var("MASTER_PORT", Type::kCount, kDdprun, "the TCP port of rank 0's store").with_range(1, 65535);
inline constexpr EnvVar kOmpNumThreads =
    var("OMP_NUM_THREADS", Type::kCount, kDdprun | kUser, "intra-op threads per rank").with_range(1, kMaxCount);
inline constexpr EnvVar kColumns =
    var("COLUMNS", Type::kCount, kDdprun, "the terminal's width less the rank prefix").with_range(1, kMaxCount);

// --- torchelastic's (ddprun sets them as torchrun does) ---
inline constexpr EnvVar kRunId = var("TORCHELASTIC_RUN_ID", Type::kText, kDdprun, "the job id (--rdzv-id)");
inline constexpr EnvVar kRestartCount =
    var("TORCHELASTIC_RESTART_COUNT", Type::kCount, kDdprun, "the attempt: 0 first, k after k restarts")
        .with_range(0, kMaxCount);
inline constexpr EnvVar kMaxRestarts =
    var("TORCHELASTIC_MAX_RESTARTS", Type::kCount, kDdprun, "--max-restarts").with_range(0, kMaxCount);
inline constexpr EnvVar kErrorFile =
    var("TORCHELASTIC_ERROR_FILE", Type::kText, kDdprun, "the file a failing rank writes its error to");

// --- ddp's own, from the launcher ---
inline constexpr EnvVar kBackend =
    var("DDP_BACKEND", Type::kChoice, kDdprun | kUser, "the backend the launcher chose (or the user's)")
        .with_choices("gloo|mpi|nccl|local|auto");
inline constexpr EnvVar kBackendOnGpu =
    var("DDP_BACKEND_ON_GPU", Type::kChoice, kDdprun,
        "the backend a rank whose device is a GPU takes instead of DDP_BACKEND (ddprun's auto on a node with GPUs)")
        .with_choices("nccl");
inline constexpr EnvVar kBackendReason = var("DDP_BACKEND_REASON", Type::kText, kDdprun, "why DDP_BACKEND was chosen");
inline constexpr EnvVar kLauncher =
    var("DDP_LAUNCHER", Type::kChoice, kDdprun | kSpawn, "who started the rank").with_choices("ddprun|ddp::spawn");
inline constexpr EnvVar kSpawnChild =
    var("DDP_SPAWN_CHILD", Type::kCount, kSpawn, "this rank runs the k-th spawn() call's function")
        .with_range(0, kMaxCount);
inline constexpr EnvVar kTimeout =
    var("DDP_TIMEOUT", Type::kSeconds, kDdprun | kUser, "how long a rank waits in the rendezvous or a collective")
        .with_range(0, kMaxSeconds, true);
inline constexpr EnvVar kRdzvTimeout =
    var("DDP_RDZV_TIMEOUT", Type::kSeconds, kDdprun | kUser, "how long a rank waits for rank 0's store to answer")
        .with_range(0, kMaxSeconds, true);
inline constexpr EnvVar kHeartbeatTimeout = var("DDP_HEARTBEAT_TIMEOUT", Type::kSeconds, kDdprun | kUser,
                                                "after how long a rank that stopped answering fails the job")
                                                .with_range(0, kMaxSeconds)
                                                .with_zero_means("turns the heartbeat off");
inline constexpr EnvVar kRecovery =
    var("DDP_RECOVERY", Type::kChoice, kDdprun,
        "inplace: ddprun hosts the store at MASTER_ADDR:MASTER_PORT and marks a lost rank there; the survivors "
        "rebuild their group and go on (ddp::Membership)")
        .with_choices("restart|inplace");
inline constexpr EnvVar kJoin =
    var("DDP_JOIN", Type::kCount, kDdprun,
        "1: this rank replaces a lost one under --recovery inplace and joins the running job (ddp::Membership::join)")
        .with_range(0, 1);
inline constexpr EnvVar kExitLinger =
    var("DDP_EXIT_LINGER", Type::kSeconds, kDdprun | kUser, "how long a failing rank waits before it exits (mpi)")
        .with_range(0, 60);
inline constexpr EnvVar kTty =
    var("DDP_TTY", Type::kChoice, kDdprun, "1: the rank's stdout reaches a terminal; 0: it does not")
        .with_choices("1|0");

// --- set by mpirun or Slurm, read where the launcher's are missing ---
inline constexpr EnvVar kOmpiRank =
    var("OMPI_COMM_WORLD_RANK", Type::kCount, kMpirun, "OpenMPI's rank").with_range(0, kMaxCount);
inline constexpr EnvVar kOmpiSize =
    var("OMPI_COMM_WORLD_SIZE", Type::kCount, kMpirun, "OpenMPI's world size").with_range(0, kMaxCount);
inline constexpr EnvVar kOmpiLocalRank =
    var("OMPI_COMM_WORLD_LOCAL_RANK", Type::kCount, kMpirun, "OpenMPI's rank on the node").with_range(0, kMaxCount);
inline constexpr EnvVar kPmiRank = var("PMI_RANK", Type::kCount, kMpirun, "PMI's rank").with_range(0, kMaxCount);
inline constexpr EnvVar kPmiSize = var("PMI_SIZE", Type::kCount, kMpirun, "PMI's world size").with_range(0, kMaxCount);
inline constexpr EnvVar kPmixRank = var("PMIX_RANK", Type::kCount, kMpirun, "PMIx's rank").with_range(0, kMaxCount);
inline constexpr EnvVar kSlurmProcId =
    var("SLURM_PROCID", Type::kCount, kSlurm, "Slurm's task rank").with_range(0, kMaxCount);
inline constexpr EnvVar kSlurmNtasks =
    var("SLURM_NTASKS", Type::kCount, kSlurm, "Slurm's number of tasks").with_range(0, kMaxCount);
inline constexpr EnvVar kSlurmLocalId =
    var("SLURM_LOCALID", Type::kCount, kSlurm, "Slurm's task rank on its node").with_range(0, kMaxCount);
inline constexpr EnvVar kSlurmNodeId =
    var("SLURM_NODEID", Type::kCount, kSlurm, "the node's index in the step").with_range(0, kMaxCount);
inline constexpr EnvVar kSlurmStepNumTasks =
    var("SLURM_STEP_NUM_TASKS", Type::kCount, kSlurm, "the srun step's number of tasks").with_range(1, kMaxCount);
inline constexpr EnvVar kSlurmStepNumNodes =
    var("SLURM_STEP_NUM_NODES", Type::kCount, kSlurm, "the srun step's number of nodes").with_range(1, kMaxCount);
inline constexpr EnvVar kSlurmStepTasksPerNode =
    var("SLURM_STEP_TASKS_PER_NODE", Type::kText, kSlurm, "the step's tasks on each node, as 2(x3),1");
inline constexpr EnvVar kSlurmStepNodelist =
    var("SLURM_STEP_NODELIST", Type::kText, kSlurm, "the step's hosts, as node[01-04,07]");
inline constexpr EnvVar kSlurmJobNodelist =
    var("SLURM_JOB_NODELIST", Type::kText, kSlurm, "the job's hosts, as node[01-04,07]");
inline constexpr EnvVar kSlurmJobId = var("SLURM_JOB_ID", Type::kText, kSlurm, "the job's id");
inline constexpr EnvVar kSlurmRestartCount =
    var("SLURM_RESTART_COUNT", Type::kCount, kSlurm, "how often Slurm requeued the job").with_range(0, kMaxCount);

// --- for mpirun itself (ddprun's --backend mpi) ---
inline constexpr EnvVar kOmpiSigkillTimeout = var("OMPI_MCA_odls_base_sigkill_timeout", Type::kCount, kDdprun | kUser,
                                                  "mpirun's pause before it kills the other ranks (ddprun: 0)")
                                                  .with_range(0, kMaxCount);
inline constexpr EnvVar kOmpiAllowRoot =
    var("OMPI_ALLOW_RUN_AS_ROOT", Type::kChoice, kDdprun, "lets mpirun run as root (ddprun as root)").with_choices("1");
inline constexpr EnvVar kOmpiAllowRootConfirm =
    var("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", Type::kChoice, kDdprun, "the same, confirmed").with_choices("1");

// --- the user's, to tune or debug ---
inline constexpr EnvVar kTimeline = var("DDP_TIMELINE", Type::kText, kUser, "FILE: record a timeline of every rank");
inline constexpr EnvVar kWaitReportInterval =
    var("DDP_WAIT_REPORT_INTERVAL", Type::kSeconds, kUser, "after how long a waiting collective says what it waits for")
        .with_range(0, kMaxSeconds, true);
inline constexpr EnvVar kDebug =
    var("DDP_DEBUG", Type::kChoice, kUser,
        "OFF (ranks compare nothing before a collective), INFO (a hash of each call, the default) or DETAIL (each "
        "whole call)")
        .with_choices("OFF|INFO|DETAIL");
inline constexpr EnvVar kTorchDebug =
    var("TORCH_DISTRIBUTED_DEBUG", Type::kChoice, kUser, "PyTorch's name for DDP_DEBUG")
        .with_choices("OFF|INFO|DETAIL");
inline constexpr EnvVar kCheckHookWaits =
    var("DDP_CHECK_HOOK_WAITS", Type::kChoice, kUser,
        "1: a wait for communication inside a gradient hook throws; 0: off (default: on with DDP_DEBUG=DETAIL)")
        .with_choices("1|0");
inline constexpr EnvVar kContinuations =
    var("DDP_CONTINUATIONS", Type::kChoice, kUser,
        "sequencer (the default: continuations run when their Work completes) or waiter (on the first thread that "
        "waits)")
        .with_choices("sequencer|waiter");
inline constexpr EnvVar kMpiInline =
    var("DDP_MPI_INLINE", Type::kChoice, kUser, "0: the mpi backend never runs small collectives inline")
        .with_choices("1|0");
inline constexpr EnvVar kMalloc =
    var("DDP_MALLOC", Type::kChoice, kUser, "system: glibc's malloc defaults, not ddp-train's tuning")
        .with_choices("system|tuned");
inline constexpr EnvVar kGlibcTunables = var("GLIBC_TUNABLES", Type::kText, kUser, "glibc's own malloc settings");
inline constexpr EnvVar kDataDir = var("DDP_DATA_DIR", Type::kText, kUser, "DIR: where recipes find their data sets");
inline constexpr EnvVar kGlooSocketIfname =
    var("GLOO_SOCKET_IFNAME", Type::kText, kUser, "the network interface gloo uses (default: toward MASTER_ADDR)");
inline constexpr EnvVar kOnednnMaxCpuIsa =
    var("ONEDNN_MAX_CPU_ISA", Type::kText, kUser, "oneDNN's highest instruction set (AVX2 forces its AVX2 paths)");
inline constexpr EnvVar kDnnlMaxCpuIsa = var("DNNL_MAX_CPU_ISA", Type::kText, kUser, "oneDNN's older name for it");
inline constexpr EnvVar kCudaVisibleDevices =
    var("CUDA_VISIBLE_DEVICES", Type::kText, kUser, "the GPUs this node's ranks may use");
inline constexpr EnvVar kCublasWorkspaceConfig =
    var("CUBLAS_WORKSPACE_CONFIG", Type::kText, kUser,
        "cuBLAS's workspace (ddp-train --deterministic: :4096:8 unless set)");

inline constexpr const EnvVar* kAll[] = {&kRank,
                                         &kLocalRank,
                                         &kWorldSize,
                                         &kLocalWorldSize,
                                         &kGroupRank,
                                         &kGroupWorldSize,
                                         &kRoleName,
                                         &kRoleRank,
                                         &kRoleWorldSize,
                                         &kMasterAddr,
                                         &kMasterPort,
                                         &kOmpNumThreads,
                                         &kColumns,
                                         &kRunId,
                                         &kRestartCount,
                                         &kMaxRestarts,
                                         &kErrorFile,
                                         &kBackend,
                                         &kBackendOnGpu,
                                         &kBackendReason,
                                         &kLauncher,
                                         &kSpawnChild,
                                         &kTimeout,
                                         &kRdzvTimeout,
                                         &kHeartbeatTimeout,
                                         &kRecovery,
                                         &kJoin,
                                         &kExitLinger,
                                         &kTty,
                                         &kOmpiRank,
                                         &kOmpiSize,
                                         &kOmpiLocalRank,
                                         &kPmiRank,
                                         &kPmiSize,
                                         &kPmixRank,
                                         &kSlurmProcId,
                                         &kSlurmNtasks,
                                         &kSlurmLocalId,
                                         &kSlurmNodeId,
                                         &kSlurmStepNumTasks,
                                         &kSlurmStepNumNodes,
                                         &kSlurmStepTasksPerNode,
                                         &kSlurmStepNodelist,
                                         &kSlurmJobNodelist,
                                         &kSlurmJobId,
                                         &kSlurmRestartCount,
                                         &kOmpiSigkillTimeout,
                                         &kOmpiAllowRoot,
                                         &kOmpiAllowRootConfirm,
                                         &kTimeline,
                                         &kWaitReportInterval,
                                         &kDebug,
                                         &kTorchDebug,
                                         &kCheckHookWaits,
                                         &kContinuations,
                                         &kMpiInline,
                                         &kMalloc,
                                         &kGlibcTunables,
                                         &kDataDir,
                                         &kGlooSocketIfname,
                                         &kOnednnMaxCpuIsa,
                                         &kDnnlMaxCpuIsa,
                                         &kCudaVisibleDevices,
                                         &kCublasWorkspaceConfig};

// The variable looked up by name in kAll; nullptr when it is not declared.
const EnvVar* find(const std::string& name);

// An environment: a name's value, or nullopt when unset. process() is the process's own.
using EnvFn = std::function<std::optional<std::string>(const std::string&)>;
EnvFn process();
// An environment of fixed values (tests, a child's environment to be).
EnvFn fixed(std::vector<std::pair<std::string, std::string>> values);

// What is wrong with `text` as a value of `v`: "" when it is valid, else one line naming the variable, the value
// and what it must be ("DDP_TIMEOUT='soon' must be a positive number of seconds (at most 1e7)").
std::string problem(const EnvVar& v, const std::string& text);
// What a valid value of `v` is, for messages: "a positive number of seconds (at most 1e7)".
std::string expected(const EnvVar& v);

// The readers. nullopt when the variable is unset or empty; InvalidArgument("[init] " + problem) when its value is
// not valid for its declaration.
std::optional<std::string> text(const EnvVar& v, const EnvFn& env = process());
std::optional<int> count(const EnvVar& v, const EnvFn& env = process());
std::optional<double> seconds(const EnvVar& v, const EnvFn& env = process());
std::optional<std::string> choice(const EnvVar& v, const EnvFn& env = process());  // as declared in `choices`
// The first of several that is set (RANK, then OMPI_COMM_WORLD_RANK, ...).
std::optional<int> first_count(std::initializer_list<const EnvVar*> vars, const EnvFn& env = process());

// The first valid one, ignoring malformed values: for error paths, which must not throw.
std::optional<int> first_valid_count(std::initializer_list<const EnvVar*> vars, const EnvFn& env = process());

// Parses `text` as `v` declares (no prefix on the error; InvalidArgument(problem)).
double parse_seconds(const EnvVar& v, const std::string& text);

// Seconds written back for a child's environment ("0.5", "30", "1e+07" never: shortest exact decimal).
std::string format_seconds(double s);

}  // namespace ddp::launch_env
