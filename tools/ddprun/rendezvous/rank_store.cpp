#include "rendezvous/rank_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "ddp/dist/membership_keys.h"
#include "rendezvous/rdzv_store.h"

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

// Every operation on the store has a deadline (guard_store): a client whose link to node 0 is cut must not hang.
class NodeStore final : public RankStore {
 public:
  NodeStore(std::shared_ptr<RdzvKV> kv, int node) : kv_(std::move(kv)), node_(node) {}

  void mark_lost(int rank, pid_t pid, const std::string& how) override {
    try {
      int id = rank;
      const std::string registered = ddp::membership_keys::pid(node_, static_cast<long>(pid));
      if (kv_->check(registered)) id = std::stoi(kv_->get(registered));
      kv_->set(ddp::membership_keys::lost(id), how);
    } catch (const std::exception& e) {  // node 0's ddprun is gone (the job with it), or its link is cut
      std::fprintf(stderr, "ddprun: warning: cannot mark rank %d lost in the ranks' store: %s\n", rank, e.what());
    }
  }

  bool job_running() override {
    try {
      return kv_->check(ddp::membership_keys::current());
    } catch (const std::exception&) {  // node 0's store did not answer: its ranks' start fails and says so
      return false;
    }
  }

  std::string beat() override {
    try {
      kv_->add(key("beat", node_), 1);
      return "";
    } catch (const std::exception& e) {
      return std::string("this node is cut off from the job: ") + e.what() + "; stopping its ranks";
    }
  }

  void done() override {
    try {
      kv_->set(key("done", node_), "1");
    } catch (const std::exception&) {  // node 0's ddprun is gone: nobody waits for this
    }
  }

  std::vector<int> watch(int node_ranks, double silent_s) override {
    const auto silent = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(silent_s));
    if (static_cast<int>(nodes_.size()) < node_ranks) nodes_.resize(static_cast<size_t>(node_ranks));
    std::vector<int> lost;
    running_ = 0;
    for (int k = 1; k < node_ranks; ++k) {
      Node& n = nodes_[static_cast<size_t>(k)];
      if (n.ended) continue;
      if (!kv_->check(key("beat", k))) continue;  // not started (yet)
      if (kv_->check(key("done", k))) {
        n.ended = true;
        continue;
      }
      if (const int64_t b = kv_->add(key("beat", k), 0); b != n.beats) n.beats = b, n.heard = Clock::now();
      if (silent_s > 0 && Clock::now() - n.heard > silent) {
        n.ended = true;
        lost.push_back(k);
        continue;
      }
      ++running_;
    }
    return lost;
  }

  int others_running() const override { return running_; }

 private:
  static std::string key(const char* what, int node) {
    return std::string(ddp::membership_keys::kRoot) + "/node/" + std::to_string(node) + "/" + what;
  }

  struct Node {  // another node, as node 0 watches it
    int64_t beats = -1;
    Clock::time_point heard = Clock::now();
    bool ended = false;
  };

  std::shared_ptr<RdzvKV> kv_;
  int node_;
  std::vector<Node> nodes_;
  int running_ = 0;
};

}  // namespace

std::unique_ptr<RankStore> open_rank_store(const std::string& host, int port, int world_size, int node,
                                           double connect_timeout_s, double op_timeout_s, std::string* error) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = node == 0;
  o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000));
  const std::string where = host + ":" + std::to_string(port);
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(host, o);
    return std::make_unique<NodeStore>(guard_store(store, where, op_timeout_s, "the ranks' store"), node);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    *error = "--recovery inplace: cannot " +
             std::string(node == 0 ? "host the ranks' store on " : "reach the ranks' store that node 0 hosts on ") +
             where + ": " + what;
    return nullptr;
  }
}

}  // namespace ddprun
