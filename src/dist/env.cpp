#include "dist/env.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ddp/dist/device.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/slurm_env.h"

namespace ddp::detail {
namespace {

[[noreturn]] void bad(const std::string& what) { throw InvalidArgument("[init] " + what); }

namespace le = launch_env;

int parse_port(const std::string& text, const std::string& where) {
  size_t used = 0;
  long p = -1;
  try {
    p = std::stol(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || p < 1 || p > 65535) bad(where + ": port '" + text + "' must be an integer in [1, 65535]");
  return static_cast<int>(p);
}

Milliseconds resolve_timeout(const InitOptions& opts, const EnvFn& env) {
  if (opts.timeout.count() > 0) return opts.timeout;
  if (opts.timeout.count() < 0) bad("timeout must be positive");
  if (auto s = le::seconds(le::kTimeout, env)) return Milliseconds(static_cast<int64_t>(*s * 1000));
  return std::chrono::minutes(10);
}

void resolve_connect_timeout(const InitOptions& opts, const EnvFn& env, Rendezvous& r) {
  if (auto s = le::seconds(le::kRdzvTimeout, env)) {
    r.connect_timeout = Milliseconds(static_cast<int64_t>(*s * 1000));
    r.connect_source = le::kRdzvTimeout.name;
  } else if (r.timeout < kRdzvTimeout) {
    r.connect_timeout = r.timeout;
    r.connect_source = opts.timeout.count() > 0 ? "InitOptions::timeout" : le::kTimeout.name;
  } else {
    r.connect_timeout = kRdzvTimeout;
    r.connect_source = "the first-contact deadline";
  }
}

bool launched_by_mpi(const EnvFn& env) {
  return le::text(le::kOmpiSize, env) || le::text(le::kPmiSize, env) || le::text(le::kPmixRank, env);
}

}  // namespace

Rendezvous resolve_rendezvous(const InitOptions& opts, const EnvFn& given, bool mpi_available, bool nccl_available) {
  const EnvFn env = slurm::with_slurm(given);  // a task srun started: the launcher's names from Slurm's
  Rendezvous r;
  r.placement = slurm::placement(given);
  if (opts.device != "cpu") r.device = resolve_device(opts.device);
  r.timeout = resolve_timeout(opts, env);
  resolve_connect_timeout(opts, env, r);
  r.backend = opts.backend;
  r.backend_reason = "InitOptions::backend \"" + opts.backend + "\"";
  if (r.backend == "auto") {
    const auto b = le::choice(le::kBackend, env);
    const auto why = le::text(le::kBackendReason, env);      // the launcher's, e.g. "auto: one node, OpenMPI 4.1.4"
    const auto on_gpu = le::choice(le::kBackendOnGpu, env);  // the launcher's choice for a rank on a GPU
    if (on_gpu && nccl_available && r.device.is_cuda()) {
      r.backend = *on_gpu;
      r.backend_reason = why ? *why : std::string(le::kBackendOnGpu.name) + "=" + *on_gpu;
    } else if (b && *b != "auto") {
      r.backend = *b;
      r.backend_reason = why ? *why : std::string(le::kBackend.name) + "=" + *b;
    } else if (nccl_available && r.device.is_cuda()) {
      r.backend = "nccl";
      r.backend_reason = "auto: the job's device is " + r.device.str();
    } else if (mpi_available && launched_by_mpi(env)) {
      r.backend = "mpi";
      r.backend_reason =
          le::text(le::kOmpiSize, env) ? "auto: started by mpirun" : "auto: started with PMI (srun --mpi=pmix or pmi2)";
    }
  }
  if (r.backend == "mpi") {
    r.method = "mpi";
    r.rank = opts.rank;
    r.world_size = opts.world_size;
    return r;
  }

  std::optional<int> rank, world;
  if (opts.rank >= 0)
    rank = opts.rank;
  else
    rank = le::first_count({&le::kRank, &le::kOmpiRank, &le::kPmiRank}, env);
  if (opts.world_size >= 0)
    world = opts.world_size;
  else
    world = le::first_count({&le::kWorldSize, &le::kOmpiSize, &le::kPmiSize}, env);
  if (world && *world < 1)  // before any check that names the world's size
    bad("world_size " + std::to_string(*world) +
        " must be at least 1 (InitOptions::world_size, or WORLD_SIZE: the "
        "number of ranks in the job)");

  const std::string& m = opts.init_method;
  if (opts.store) {
    r.method = "store";
    if (!rank || !world) bad("with a store, pass InitOptions::rank and world_size");
  } else if (m.empty() || m == "env://") {
    auto addr = le::text(le::kMasterAddr, env);
    auto port = le::text(le::kMasterPort, env);
    if (!rank && !world && !addr && !port) {
      if (const std::string why = slurm::not_started_by_srun(env); !why.empty()) bad(why);
      rank = 0;  // no launcher, no environment: a world of one
      world = 1;
    }
    if (!world) bad("env:// needs WORLD_SIZE (ddprun and torchrun set it) or InitOptions::world_size");
    if (!rank && *world == 1) rank = 0;  // the only rank of a world of one
    if (!rank) bad("env:// needs RANK (ddprun and torchrun set it) or InitOptions::rank");
    if (*world == 1 && !addr && !port) {
      r.method = "none";
    } else {
      if (!addr || addr->empty())
        bad("env:// needs MASTER_ADDR for a world of " + std::to_string(*world) + " (ddprun and torchrun set it)");
      if (!port)
        bad("env:// needs MASTER_PORT for a world of " + std::to_string(*world) + " (ddprun and torchrun set it)");
      r.method = "env";
      r.host = *addr;
      r.port = parse_port(*port, le::kMasterPort.name);
    }
  } else if (m.rfind("tcp://", 0) == 0) {
    std::string hp = m.substr(6);
    auto colon = hp.rfind(':');
    if (colon == std::string::npos || colon == 0) bad("init_method '" + m + "' must look like tcp://host:port");
    r.method = "tcp";
    r.host = hp.substr(0, colon);
    if (r.host.size() > 2 && r.host.front() == '[' && r.host.back() == ']')
      r.host = r.host.substr(1, r.host.size() - 2);
    r.port = parse_port(hp.substr(colon + 1), "init_method '" + m + "'");
    if (!rank || !world) bad("init_method '" + m + "' needs rank and world_size (options or RANK/WORLD_SIZE)");
  } else if (m.rfind("file://", 0) == 0) {
    r.method = "file";
    r.path = m.substr(7);
    if (r.path.empty() || r.path[0] != '/') bad("init_method '" + m + "' must be file:///absolute/path");
    if (!rank || !world) bad("init_method '" + m + "' needs rank and world_size (options or RANK/WORLD_SIZE)");
  } else {
    bad("init_method '" + m + "' is not supported; use env://, tcp://host:port or file:///path");
  }
  if (*world < 1) bad("world_size " + std::to_string(*world) + " must be at least 1");
  if (*rank >= *world) bad("rank " + std::to_string(*rank) + " is out of range [0, " + std::to_string(*world) + ")");
  r.rank = *rank;
  r.world_size = *world;
  if (r.backend == "auto") {
    const bool alone = r.world_size == 1 && r.method == "none";
    r.backend = alone ? "local" : "gloo";
    r.backend_reason =
        alone ? "auto: a world of one without a launcher"
              : std::string("auto: not started by mpirun") + (mpi_available ? "" : ", no mpi backend built");
  }
  return r;
}

double exit_linger_s() { return le::seconds(le::kExitLinger).value_or(0); }

void linger_before_failed_exit() {
  double s = 0;
  try {
    s = exit_linger_s();
  } catch (...) {
    return;
  }
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

}  // namespace ddp::detail
