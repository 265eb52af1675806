#include "rendezvous/rendezvous.h"

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string secs(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

// "r<R>/closed": "N PORT RESTART_COUNT HOST_JOIN_INDEX".
struct Closed {
  int nnodes = 0, port = 0, restart_count = 0, host_index = 0;
};

Closed parse_closed(const std::string& value) {
  Closed c;
  std::istringstream in(value);
  if (!(in >> c.nnodes >> c.port >> c.restart_count >> c.host_index))
    throw RendezvousError("malformed rendezvous round record '" + value + "' in the store (another program's?)");
  return c;
}

}  // namespace

std::string Rendezvous::key(int round, const std::string& name) const {
  return "ddprun/r" + std::to_string(round) + "/" + name;
}

std::string Rendezvous::where() const { return "rendezvous at " + s_.host + ":" + std::to_string(s_.port); }

std::string Rendezvous::wait_key(const std::string& k, const std::string& what) {
  const auto start = Clock::now();
  for (;;) {
    if (kv_.check(k)) return kv_.get(k);
    if (since(start) >= s_.join_timeout_s)
      throw RendezvousError(where() + ": " + what + " did not happen within join_timeout " + secs(s_.join_timeout_s) +
                            " (--rdzv-conf join_timeout); are at least " + std::to_string(s_.min_nodes) +
                            " node(s) started with the same --rdzv-endpoint and --rdzv-id?");
    if (int sig = s_.sleep(s_.poll_s)) throw RdzvInterrupted{sig};
  }
}

void Rendezvous::check_job() {
  if (job_checked_) return;
  if (s_.is_host) kv_.set("ddprun/job", s_.job_id);
  std::string job = wait_key("ddprun/job", "the host agent's store setup");
  if (job != s_.job_id)
    throw RendezvousError(where() + ": the store belongs to job '" + job + "' but this node has --rdzv-id '" +
                          s_.job_id +
                          "'; give every node of a job the same --rdzv-id (and each job its own "
                          "--rdzv-endpoint port)");
  job_checked_ = true;
}

void Rendezvous::close_round(int round) {
  int restart_count = 0;
  if (round > 0) {
    Closed prev = parse_closed(kv_.get(key(round - 1, "closed")));
    restart_count = prev.restart_count + (kv_.check(key(round - 1, "failed")) ? 1 : 0);
  }
  const auto start = Clock::now();
  auto last_change = start;
  int64_t last_n = -1;
  int64_t n = 0;
  for (;;) {
    n = kv_.add(key(round, "joined"), 0);
    if (n != last_n) {
      last_n = n;
      last_change = Clock::now();
    }
    if (n >= s_.max_nodes || (n >= s_.min_nodes && since(last_change) >= s_.last_call_s)) break;
    if (since(start) >= s_.join_timeout_s)
      throw RendezvousError(where() + ": round " + std::to_string(round) + ": only " + std::to_string(n) +
                            " of at least " + std::to_string(s_.min_nodes) + " node(s) joined within join_timeout " +
                            secs(s_.join_timeout_s) + " (--nnodes " + std::to_string(s_.min_nodes) + ":" +
                            std::to_string(s_.max_nodes) +
                            ", --rdzv-conf join_timeout); start ddprun on the other "
                            "nodes with the same --rdzv-endpoint and --rdzv-id");
    if (int sig = s_.sleep(s_.poll_s)) throw RdzvInterrupted{sig};
  }
  if (n > s_.max_nodes) n = s_.max_nodes;
  int port = s_.pick_port();
  if (port <= 0) throw RendezvousError(where() + ": cannot find a free port for the ranks' store on this host");
  kv_.add(key(round, "live"), n);  // nodes in the running round (--recovery inplace), before anyone reads it
  kv_.set(key(round, "closed"), std::to_string(n) + " " + std::to_string(port) + " " + std::to_string(restart_count) +
                                    " " + std::to_string(host_index_));
}

RoundInfo Rendezvous::describe(int round, int index) {
  Closed c = parse_closed(wait_key(key(round, "closed"), "round " + std::to_string(round) + " closing"));
  // The host is node 0; the others follow in join order, as many as fit.
  std::vector<int> members = {c.host_index};
  for (int i = 1; static_cast<int>(members.size()) < c.nnodes; ++i)
    if (i != c.host_index) members.push_back(i);
  RoundInfo r;
  r.round = round;
  r.node_rank = -1;
  r.nnodes = c.nnodes;
  r.master_addr = s_.host;
  r.master_port = c.port;
  r.restart_count = c.restart_count;
  for (int g = 0; g < c.nnodes; ++g) {
    const int member = members[static_cast<size_t>(g)];
    const std::string text =
        wait_key(key(round, "nproc" + std::to_string(member)), "node " + std::to_string(g) + "'s registration");
    if (member == index) r.node_rank = g, r.first_rank = r.world_size;
    r.world_size += std::atoi(text.c_str());
  }
  return r;
}

RoundInfo Rendezvous::next_round() {
  check_job();
  int round = next_;
  if (round < 0) {  // a node starting: the first round not closed yet
    round = 0;
    while (kv_.check(key(round, "closed"))) ++round;
    RoundInfo running;  // --recovery inplace: the round before it may be running
    if (s_.inplace && round > 0 && attach(round - 1, describe(round - 1, -1), &running)) {
      next_ = round;
      return running;
    }
  }
  for (;;) {
    const int index = static_cast<int>(kv_.add(key(round, "joined"), 1));  // 1-based join order
    kv_.set(key(round, "nproc" + std::to_string(index)), std::to_string(s_.nproc));
    if (s_.is_host) {
      host_index_ = index;
      close_round(round);
    }
    RoundInfo r = describe(round, index);
    if (r.node_rank < 0 && s_.inplace && attach(round, r, &r)) {
      next_ = round + 1;
      return r;
    }
    if (r.node_rank < 0) {  // joined after the close: the next round (the running ones see us waiting)
      if (s_.log)
        s_.log("round " + std::to_string(round) + " closed with " + std::to_string(r.nnodes) +
               " node(s) before this node joined; waiting for the next round");
      ++round;
      continue;
    }
    next_ = round + 1;
    return r;
  }
}

bool Rendezvous::attach(int round, const RoundInfo& closed, RoundInfo* r) {
  const auto start = Clock::now();
  bool told = false;
  for (;;) {
    if (kv_.check(key(round, "failed")) || kv_.add(key(round, "live"), 0) <= 0) return false;  // it ended
    if (kv_.add(key(round, "live"), 1) <= s_.max_nodes) break;
    kv_.add(key(round, "live"), -1);
    if (!told && s_.log)
      s_.log("round " + std::to_string(round) + " runs " + std::to_string(s_.max_nodes) +
             " node(s), the most --nnodes allows: waiting for a place (a node that ends or is lost)");
    told = true;
    if (since(start) >= s_.join_timeout_s)
      throw RendezvousError(where() + ": round " + std::to_string(round) + " kept " + std::to_string(s_.max_nodes) +
                            " node(s), the most --nnodes allows, for join_timeout " + secs(s_.join_timeout_s) +
                            " (--rdzv-conf join_timeout): no place for this node");
    if (int sig = s_.sleep(s_.poll_s)) throw RdzvInterrupted{sig};
  }
  *r = closed;
  const int extra = static_cast<int>(kv_.add(key(round, "extra"), 1));  // 1-based
  r->node_rank = closed.nnodes + extra - 1;
  r->first_rank = closed.world_size + (extra - 1) * s_.nproc;  // names only: its ranks join with new ids
  r->attached = true;
  if (s_.log)
    s_.log("round " + std::to_string(round) + " is running (--recovery inplace): this node attaches to it as node " +
           std::to_string(r->node_rank) + "; its ranks join the job");
  return true;
}

void Rendezvous::node_left(const RoundInfo& r) { kv_.add(key(r.round, "live"), -1); }

int Rendezvous::live_nodes(const RoundInfo& r) { return static_cast<int>(kv_.add(key(r.round, "live"), 0)); }

bool Rendezvous::any_done(const RoundInfo& r) { return kv_.add(key(r.round, "done"), 0) > 0; }

int Rendezvous::node_ranks(const RoundInfo& r) {
  return r.nnodes + static_cast<int>(kv_.add(key(r.round, "extra"), 0));
}

std::string Rendezvous::should_stop(const RoundInfo& r) {
  if (kv_.check(key(r.round, "failed")))
    return "round " + std::to_string(r.round) + " failed on " + kv_.get(key(r.round, "failed"));
  if (s_.inplace) return "";  // nodes that come attach to the running round
  if (kv_.check(key(r.round, "grow"))) return kv_.get(key(r.round, "grow"));
  if (r.nnodes < s_.max_nodes) {
    int64_t waiting = kv_.add(key(r.round + 1, "joined"), 0);
    if (waiting > 0) {
      std::string why = std::to_string(waiting) + " node(s) waiting to join (round " + std::to_string(r.round) +
                        " has " + std::to_string(r.nnodes) + " of at most " + std::to_string(s_.max_nodes) +
                        "): restarting into a bigger round (not counted as a restart)";
      kv_.set(key(r.round, "grow"), why);
      return why;
    }
  }
  return "";
}

void Rendezvous::mark_failed(const RoundInfo& r, const std::string& what) {
  if (kv_.check(key(r.round, "failed")) || kv_.check(key(r.round, "grow"))) return;
  kv_.set(key(r.round, "failed"), "node " + std::to_string(r.node_rank) + ": " + what);
}

bool Rendezvous::failed(const RoundInfo& r) { return kv_.check(key(r.round, "failed")); }

void Rendezvous::mark_done(const RoundInfo& r) { kv_.add(key(r.round, "done"), 1); }

int Rendezvous::wait_done(const RoundInfo& r, double timeout_s, bool stop_on_failure) {
  const auto start = Clock::now();
  for (;;) {
    int64_t done = kv_.add(key(r.round, "done"), 0);
    if (done >= r.nnodes || (stop_on_failure && kv_.check(key(r.round, "failed"))) || since(start) >= timeout_s)
      return static_cast<int>(done);
    if (s_.sleep(s_.poll_s)) return static_cast<int>(done);
  }
}

}  // namespace ddprun
