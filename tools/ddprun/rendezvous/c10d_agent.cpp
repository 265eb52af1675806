#include "rendezvous/c10d_agent.h"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "launch/net_check.h"
#include "output/output.h"
#include "rendezvous/rdzv_store.h"
#include "rendezvous/rendezvous.h"
#include "supervise/signals.h"

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;

// The longest the hosting agent waits, after its ranks succeeded, for the other nodes to report theirs.
constexpr double kDoneWait_s = 60;

// Sleeps that end early on a stop signal, while a SignalPipe exists (between attempts only).
class SignalSleep {
 public:
  SignalSleep() : pipe_(std::make_unique<SignalPipe>(std::vector<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT})) {}
  int operator()(double seconds) {
    struct pollfd fd = {pipe_->read_fd(), POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(seconds * 1000)) > 0)
      for (int sig : pipe_->drain()) return sig;
    return 0;
  }

 private:
  std::unique_ptr<SignalPipe> pipe_;
};

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// --recovery inplace: the round runs until the job ends; its ranks go on in place when nodes are lost, and nodes
// that come attach to it (rendezvous.h). A node's failure ends that node only, unless fewer than MIN nodes are
// left: the host then fails the round, and every node takes the restart path.
AttemptOutcome launch_inplace(Rendezvous& rdzv, const RoundInfo& r, Attempt attempt, const RoundLaunch& launch,
                              int min_nodes) {
  attempt.attached = r.attached;
  attempt.node_lost = [&rdzv, &r](int) { rdzv.node_left(r); };
  attempt.node_ranks = [&rdzv, &r] { return rdzv.node_ranks(r); };
  if (r.node_rank == 0) {
    attempt.external_stop = [&rdzv, &r, min_nodes, stop = attempt.external_stop]() -> std::string {
      // A node that ended normally ended the job: fewer nodes then is its end, not a loss.
      if (const int live = rdzv.live_nodes(r); live < min_nodes && !rdzv.failed(r) && !rdzv.any_done(r))
        rdzv.mark_failed(r, "only " + plural(live, "node") + " left, fewer than --nnodes' minimum " +
                                std::to_string(min_nodes) + " (--recovery inplace falls back to the restart path)");
      return stop();
    };
  }
  AttemptOutcome out = launch(attempt);
  try {
    if (out.exit_code == 0) rdzv.mark_done(r);  // first: the host never sees it gone without it done
    rdzv.node_left(r);                          // its place is free
  } catch (const RendezvousError&) {            // the host's store ended with the job
  }
  return out;
}

}  // namespace

int run_c10d(const Options& options, const LaunchBackend& backend, const RoundLaunch& launch) {
  const std::string endpoint = options.rdzv_host + ":" + std::to_string(options.rdzv_port);
  // A store operation answers in milliseconds; no answer within the heartbeat timeout means its host is gone.
  const double op_timeout_s = std::max(5.0, options.heartbeat_timeout_s > 0 ? options.heartbeat_timeout_s : 30.0);
  RdzvStore store;
  try {
    store = open_rdzv_store(options.rdzv_host, options.rdzv_port, options.join_timeout_s, op_timeout_s);
  } catch (const RendezvousError& e) {
    report(e.what());
    return 1;
  }
  SignalSleep* sleeper = nullptr;  // set while waiting in the rendezvous
  RdzvSettings settings;
  settings.min_nodes = options.nnodes_min;
  settings.max_nodes = options.nnodes_max;
  settings.last_call_s = options.last_call_timeout_s;
  settings.join_timeout_s = options.join_timeout_s;
  settings.host = options.rdzv_host;
  settings.port = options.rdzv_port;
  settings.job_id = options.rdzv_id;
  settings.nproc = options.nproc_per_node;
  settings.is_host = store.is_host;
  settings.sleep = [&sleeper](double s) { return (*sleeper)(s); };
  settings.pick_port = [] {
    std::string error;
    return pick_free_port(&error);
  };
  settings.log = [](const std::string& line) { report(line); };
  settings.inplace = options.recovery == Recovery::kInplace;
  Rendezvous rdzv(*store.kv, settings);
  report(std::string(store.is_host ? "hosting" : "joining") + " the c10d rendezvous at " + endpoint + " (job " +
         options.rdzv_id + ", --nnodes " + std::to_string(options.nnodes_min) + ":" +
         std::to_string(options.nnodes_max) + ")");

  for (;;) {
    RoundInfo r;
    try {
      SignalSleep sleep;
      sleeper = &sleep;
      r = rdzv.next_round();
      sleeper = nullptr;
    } catch (const RendezvousError& e) {
      report(e.what());
      return 1;
    } catch (const RdzvInterrupted& i) {
      report("received " + signal_name(i.signal) + " during the rendezvous: stopping");
      return 128 + i.signal;
    }
    if (r.attached)
      report("round " + std::to_string(r.round) + ": node rank " + std::to_string(r.node_rank) +
             ", attached (the round " + "started with " + std::to_string(r.nnodes) + " node(s), " +
             std::to_string(r.world_size) + " ranks), MASTER_ADDR:MASTER_PORT " + r.master_addr + ":" +
             std::to_string(r.master_port));
    else
      report("round " + std::to_string(r.round) + ": node rank " + std::to_string(r.node_rank) + " of " +
             std::to_string(r.nnodes) + " node(s), ranks " + std::to_string(r.first_rank) + ".." +
             std::to_string(r.first_rank + options.nproc_per_node - 1) + " of " + std::to_string(r.world_size) +
             ", MASTER_ADDR:MASTER_PORT " + r.master_addr + ":" + std::to_string(r.master_port) + ", restart count " +
             std::to_string(r.restart_count));
    Attempt attempt;
    attempt.backend = backend;
    attempt.place = {r.node_rank, r.nnodes, r.world_size, r.first_rank, r.master_addr, r.master_port};
    attempt.restart_count = r.restart_count;
    std::string lost;  // the store was lost while the ranks ran
    attempt.external_stop = [&]() -> std::string {
      try {
        return rdzv.should_stop(r);
      } catch (const RendezvousError& e) {
        lost = e.what();
        return lost;
      }
    };
    AttemptOutcome out;
    if (settings.inplace) {
      out = launch_inplace(rdzv, r, attempt, launch, options.nnodes_min);
      bool failed = false;
      try {
        failed = rdzv.failed(r);
      } catch (const RendezvousError&) {  // the host's store ended with the job
      }
      if (!failed) {  // the job ended here: no round restarts under inplace
        if (out.exit_code == 0 && r.restart_count > 0)
          report("round " + std::to_string(r.round) + " succeeded after " + plural(r.restart_count, "restart"));
        return out.exit_code;
      }  // fewer than MIN nodes: the restart path, below
    } else {
      out = launch(attempt);
    }
    const int code = out.exit_code != 0 ? out.exit_code : (lost.empty() ? 0 : 1);
    if (!lost.empty() && out.exit_code != 0) {
      report(lost + "; cannot re-join: exiting");
      return code;
    }
    try {
      if (out.exit_code == 0) {
        rdzv.mark_done(r);
        if (store.is_host) {  // the store lives in this process: keep it until every node is done
          SignalSleep sleep;
          sleeper = &sleep;
          int done = rdzv.wait_done(r, std::min(options.join_timeout_s, kDoneWait_s), /*stop_on_failure=*/true);
          sleeper = nullptr;
          if (done < r.nnodes)
            report("warning: only " + std::to_string(done) + " of " + std::to_string(r.nnodes) +
                   " node(s) reported success before this node (the rendezvous host) exits");
        }
        if (r.restart_count > 0)
          report("round " + std::to_string(r.round) + " succeeded after " + plural(r.restart_count, "restart"));
        return 0;
      }
      if (!out.stopped_externally) rdzv.mark_failed(r, out.failure);
      const bool counted = rdzv.failed(r);
      const bool last = out.stopped_by_signal || (counted && r.restart_count >= options.max_restarts);
      if (last) {
        if (!out.stopped_by_signal && out.stopped_externally)
          report(options.max_restarts > 0 ? "failed after " + plural(r.restart_count, "restart") + " (--max-restarts " +
                                                std::to_string(options.max_restarts) + "): restarts exhausted"
                                          : "not restarting (--max-restarts 0)");
        rdzv.mark_done(r);
        if (store.is_host) {  // let the others read the round's end before the store goes
          SignalSleep sleep;
          sleeper = &sleep;
          rdzv.wait_done(r, options.kill_grace_s + 2 * options.monitor_interval_s + 5, /*stop_on_failure=*/false);
          sleeper = nullptr;
        }
        return code;
      }
      report(counted ? "re-joining the rendezvous for round " + std::to_string(r.round + 1) + " (restart " +
                           std::to_string(r.restart_count + 1) + " of " + std::to_string(options.max_restarts) + ")"
                     : "re-joining the rendezvous for round " + std::to_string(r.round + 1) +
                           " (nodes joining; not counted as a restart)");
    } catch (const RendezvousError& e) {
      report(std::string(e.what()) + "; exiting");
      return code != 0 ? code : 1;
    }
  }
}

}  // namespace ddprun
