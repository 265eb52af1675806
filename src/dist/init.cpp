#include "ddp/dist/init.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dist/error_context.h"
#include "dist/env.h"
#include "dist/message.h"

namespace ddp {
namespace {

// Under ddprun, make stdout line buffered so rank output arrives line by line.
const bool kLineBuffered = [] {
  if (std::getenv("DDP_LAUNCHER")) std::setvbuf(stdout, nullptr, _IOLBF, 0);
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

// Rendezvous over TCP; rank 0 hosts the store. Failures name host and port.
StorePtr open_tcp_store(const detail::Rendezvous& r) {
  ErrorContext ctx{r.backend, r.rank, r.world_size, "init"};
  std::string where = r.host + ":" + std::to_string(r.port);
  try {
    return make_tcp_store(r.host, r.port, r.rank == 0, r.world_size, r.timeout);
  } catch (...) {
    std::string msg = detail::current_exception_message();
    if (r.rank == 0 && contains_ci(msg, "in use"))
      throw Error(ctx.prefix() + "cannot listen on " + where +
                  " (MASTER_ADDR:MASTER_PORT): address already in use; choose another port "
                  "or launch with ddprun --standalone");
    if (r.rank == 0)
      throw Error(ctx.prefix() + "cannot start the rendezvous store on " + where + ": " + msg);
    throw Error(ctx.prefix() + "cannot reach rank 0's store at " + where + " within " +
                std::to_string(r.timeout.count() / 1000) + " s: " + msg +
                "; is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?");
  }
}

}  // namespace

GroupPtr create_process_group(const InitOptions& opts) {
  auto r = detail::resolve_rendezvous(opts, detail::process_env(), is_backend_available("mpi"));
  BackendOptions b;
  b.rank = r.rank;
  b.world_size = r.world_size;
  b.timeout = r.timeout;
  b.host = r.host;
  if (r.method == "store") {
    b.store = opts.store;
  } else if (r.method == "none") {
    b.store = make_hash_store();
    b.host = "127.0.0.1";
    std::fprintf(stderr, "ddp: no launcher environment (RANK, WORLD_SIZE, MASTER_ADDR unset): a world of one on "
                         "the %s backend\n", r.backend.c_str());
  } else if (r.method == "env" || r.method == "tcp") {
    if (r.backend != "local") b.store = open_tcp_store(r);
  } else if (r.method == "file") {
    b.store = make_file_store(r.path, r.world_size);
  }
  return create_backend(r.backend, b);
}

GroupPtr init_process_group(const InitOptions& opts) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_default)
    throw Error("[init] init_process_group called twice; call destroy_process_group() first");
  g_default = create_process_group(opts);
  return g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_default != nullptr;
}

GroupPtr default_group() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_default)
    throw Error("[init] the default process group is not initialized; call "
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
    throw Error(std::string("[init] ") + who + ": the default process group is not initialized; call "
                "ddp::init_process_group() first (with no launcher it makes a world of one)");
  return g_default;
}
}  // namespace

int get_rank() { return initialized("get_rank")->rank(); }
int get_world_size() { return initialized("get_world_size")->size(); }

}  // namespace ddp
