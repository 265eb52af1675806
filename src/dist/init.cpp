#include "ddp/dist/init.h"
#include "ddp/dist/timeline.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "ddp/dist/launch_env.h"
#include "ddp/dist/process_group.h"
#include "dist/backend_impl.h"
#include "dist/env.h"
#include "dist/error_context.h"
#include "dist/heartbeat.h"
#include "dist/job_id.h"
#include "dist/listen_wait.h"
#include "dist/message.h"
#include "dist/wait_report.h"

namespace ddp {
namespace {

// Under ddprun, make stdout line buffered so rank output arrives line by line.
const bool kLineBuffered = [] {
  if (launch_env::text(launch_env::kLauncher)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return true;
}();

std::mutex g_mu;
GroupPtr g_default;

bool contains_ci(std::string s, std::string needle) {
  auto lower = [](std::string& x) {
    std::transform(x.begin(), x.end(), x.begin(), [](unsigned char c) { return std::tolower(c); });
  };
  lower(s);
  lower(needle);
  return s.find(needle) != std::string::npos;
}

std::string seconds_text(Milliseconds ms) { return detail::format_seconds(ms.count() / 1000.0) + " s"; }

// Rendezvous over TCP; rank 0 hosts the store. Failures name host and port.
// A rank that cannot reach the store yet says so after 5 s, then every DDP_WAIT_REPORT_INTERVAL
// (30 s), and fails with ddp::Error at the timeout.
StorePtr open_tcp_store(const detail::Rendezvous& r) {
  ErrorContext ctx{r.backend, r.rank, r.world_size, "init"};
  const std::string where = r.host + ":" + std::to_string(r.port);
  if (r.rank != 0) {
    const auto interval =
        std::chrono::duration_cast<Milliseconds>(std::chrono::duration<double>(detail::wait_report_interval_s()));
    auto report = [&](Milliseconds waited, const std::string& why) {
      std::fprintf(stderr, "%swaiting for rank 0's store at %s: %s of %s (%s): %s\n", ctx.prefix().c_str(),
                   where.c_str(), seconds_text(Milliseconds(waited.count() / 100 * 100)).c_str(),
                   seconds_text(r.connect_timeout).c_str(), r.connect_source.c_str(), why.c_str());
      std::fflush(stderr);
    };
    const std::string why = detail::wait_until_listening(r.host, r.port, r.connect_timeout, interval, report);
    if (!why.empty())
      throw Error(ctx.prefix() + "cannot reach rank 0's store at " + where + " within " +
                  seconds_text(r.connect_timeout) + " (" + r.connect_source + "): " + why +
                  ". Is rank 0 running, and are MASTER_ADDR and MASTER_PORT the ones it was given? (to wait "
                  "longer for a rank 0 that starts late: ddprun --rdzv-timeout SECONDS, or DDP_RDZV_TIMEOUT)");
  }
  try {
    return make_tcp_store(r.host, r.port, r.rank == 0, r.world_size, r.timeout);
  } catch (...) {
    std::string msg = detail::current_exception_message();
    if (r.rank == 0 && contains_ci(msg, "in use"))
      throw Error(ctx.prefix() + "cannot listen on " + where +
                  " (MASTER_ADDR:MASTER_PORT): address already in use; choose another port "
                  "or launch with ddprun --standalone");
    if (r.rank == 0) throw Error(ctx.prefix() + "cannot start the rendezvous store on " + where + ": " + msg);
    throw Error(ctx.prefix() + "cannot connect to rank 0's store at " + where + ": " + msg +
                "; is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?");
  }
}

// A group and its heartbeat, which ends first (writing its "done" mark).
struct Monitored {
  GroupPtr group;
  std::unique_ptr<detail::Heartbeat> heartbeat;
};

// The heartbeat's own connection to the store (not the group's). Opened before the
// group's rendezvous: after it, rank 0 may already have ended and closed its store.
StorePtr open_heartbeat_store(const detail::Rendezvous& r, Milliseconds timeout) {
  try {
    // c10d connects in whole seconds: at least 1.
    return make_tcp_store(r.host, r.port, false, r.world_size, std::max(timeout, Milliseconds(1000)));
  } catch (...) {
    ErrorContext ctx{r.backend, r.rank, r.world_size, "init"};
    throw Error(ctx.prefix() + "cannot open the heartbeat's connection to the store at " + r.host + ":" +
                std::to_string(r.port) + ": " + detail::current_exception_message());
  }
}

GroupPtr with_heartbeat(GroupPtr group, const std::string& backend, Milliseconds timeout,
                        std::unique_ptr<detail::BeatChannel> channel) {
  detail::HeartbeatConfig hc;
  hc.backend = backend;
  hc.rank = group->rank();
  hc.world_size = group->size();
  hc.timeout = timeout;
  hc.channel = std::move(channel);
  hc.report_interval_s = detail::wait_report_interval_s();
  auto m = std::make_shared<Monitored>();
  m->group = std::move(group);
  try {
    m->heartbeat = std::make_unique<detail::Heartbeat>(std::move(hc));
  } catch (...) {
    ErrorContext ctx{backend, m->group->rank(), m->group->size(), "init"};
    throw Error(ctx.prefix() + "cannot start the heartbeat: " + detail::current_exception_message());
  }
  ProcessGroup* raw = m->group.get();
  return GroupPtr(std::move(m), raw);
}

}  // namespace

GroupPtr create_process_group(const InitOptions& opts) {
  auto r = detail::resolve_rendezvous(opts, launch_env::process(), is_backend_available("mpi"),
                                      is_backend_available("nccl"));
  BackendOptions b;
  if (r.device.is_cuda()) b.cuda_device = r.device.index();
  b.rank = r.rank;
  b.world_size = r.world_size;
  b.timeout = r.timeout;
  b.host = r.host;
  if (r.method == "store") {
    b.store = opts.store;
  } else if (r.method == "none") {
    b.store = make_hash_store();
    b.host = "127.0.0.1";
    std::fprintf(stderr,
                 "ddp: no launcher environment (RANK, WORLD_SIZE, MASTER_ADDR unset): a world of one on "
                 "the %s backend\n",
                 r.backend.c_str());
  } else if (r.method == "env" || r.method == "tcp") {
    if (r.backend != "local") {
      b.store = open_tcp_store(r);
      detail::check_job_id(*b.store, r);  // before any other key: the store may be another job's
    }
  } else if (r.method == "file") {
    b.store = make_file_store(r.path, r.world_size);
  }
  // Read before the rendezvous, so that a bad value fails at once.
  const Milliseconds heartbeat = detail::resolve_heartbeat_timeout(opts.heartbeat_timeout);
  const bool tcp = r.method == "env" || r.method == "tcp";
  std::unique_ptr<detail::BeatChannel> channel;
  // gloo's and nccl's liveness goes through the rendezvous store (nccl: its host side; NCCL's own watchdog only
  // fires at the collective timeout); mpi's through MPI messages (beat_channel below).
  if (tcp && (r.backend == "gloo" || r.backend == "nccl") && r.world_size > 1 && heartbeat.count() > 0)
    channel =
        detail::store_beat_channel(open_heartbeat_store(r, heartbeat), r.rank, r.host + ":" + std::to_string(r.port));
  std::unique_ptr<detail::Backend> impl = detail::create_backend_impl(r.backend, b);
  if (!channel && heartbeat.count() > 0 && impl->size() > 1) channel = impl->beat_channel();  // mpi's
  auto group = std::make_shared<ProcessGroup>(std::move(impl), b.timeout);
  if (channel) return with_heartbeat(std::move(group), r.backend, heartbeat, std::move(channel));
  return group;
}

GroupPtr init_process_group(const InitOptions& opts) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_default) throw Error("[init] init_process_group called twice; call destroy_process_group() first");
  g_default = create_process_group(opts);
  timeline::set_rank(g_default->rank());  // the timeline file is named by it
  return g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

GroupPtr default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_default)
    throw Error(
        "[init] the default process group is not initialized; call "
        "ddp::init_process_group() first");
  return g_default;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_default.reset();
}

GroupPtr new_group(const std::vector<int>& ranks, GroupPtr parent) {
  if (!parent) parent = default_group();
  return parent->new_group(ranks);
}

namespace {
GroupPtr initialized(const char* who) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_default)
    throw Error(std::string("[init] ") + who +
                ": the default process group is not initialized; call "
                "ddp::init_process_group() first (with no launcher it makes a world of one)");
  return g_default;
}
}  // namespace

int get_rank() { return initialized("get_rank")->rank(); }
int get_world_size() { return initialized("get_world_size")->size(); }

}  // namespace ddp
