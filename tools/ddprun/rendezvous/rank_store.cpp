#include "rendezvous/rank_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

#include "ddp/dist/membership_keys.h"

namespace ddprun {
namespace {

class NodeStore final : public RankStore {
 public:
  NodeStore(c10::intrusive_ptr<c10d::TCPStore> store, int node) : store_(std::move(store)), node_(node) {}
  void mark_lost(int rank, pid_t pid, const std::string& how) override {
    try {
      int id = rank;
      const std::string registered = ddp::membership_keys::pid(node_, static_cast<long>(pid));
      if (store_->check({registered})) {
        const std::vector<uint8_t> v = store_->get(registered);
        id = std::stoi(std::string(v.begin(), v.end()));
      }
      store_->set(ddp::membership_keys::lost(id), std::vector<uint8_t>(how.begin(), how.end()));
    } catch (const std::exception& e) {  // node 0's ddprun is gone (the job with it), or ours is broken
      std::fprintf(stderr, "ddprun: warning: cannot mark rank %d lost in the ranks' store: %s\n", rank, e.what());
    }
  }

  bool job_running() override { return store_->check({ddp::membership_keys::current()}); }
  void beat() override {
    try_to([&] { store_->add(key("beat", node_), 1); });
  }
  void done() override {
    try_to([&] { store_->set(key("done", node_), std::vector<uint8_t>{'1'}); });
  }

  std::vector<int> serve_until_others_end(int nnodes, double silent_s) override {
    using Clock = std::chrono::steady_clock;
    const auto silent = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(silent_s));
    std::vector<int64_t> beats(static_cast<size_t>(nnodes), -1);
    std::vector<Clock::time_point> heard(static_cast<size_t>(nnodes), Clock::now());
    std::vector<int> silent_nodes;
    bool told = false;
    for (int left = nnodes - 1; left > 0;) {
      left = 0;
      for (int k = 1; k < nnodes; ++k) {
        const auto i = static_cast<size_t>(k);
        if (beats[i] == -2 || store_->check({key("done", k)})) {
          beats[i] = -2;  // ended
          continue;
        }
        if (const int64_t b = store_->add(key("beat", k), 0); b != beats[i]) beats[i] = b, heard[i] = Clock::now();
        if (silent_s > 0 && Clock::now() - heard[i] > silent) {  // --heartbeat-timeout 0: wait for it
          beats[i] = -2;
          silent_nodes.push_back(k);
          continue;
        }
        ++left;
      }
      if (left > 0 && !told) {
        std::fprintf(stderr, "ddprun: this node's ranks ended; serving the ranks' store until the other nodes' end\n");
        told = true;
      }
      if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return silent_nodes;
  }

 private:
  static std::string key(const char* what, int node) {
    return std::string(ddp::membership_keys::kRoot) + "/node/" + std::to_string(node) + "/" + what;
  }
  template <typename F>
  void try_to(F f) {
    try {
      f();
    } catch (const std::exception&) {  // node 0's ddprun is gone: its ranks and the job with it
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
  int node_;
};

}  // namespace

std::unique_ptr<RankStore> open_rank_store(const std::string& host, int port, int world_size, int node,
                                           double timeout_s, std::string* error) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = node == 0;
  o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    return std::make_unique<NodeStore>(c10::make_intrusive<c10d::TCPStore>(host, o), node);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    *error = "--recovery inplace: cannot " +
             std::string(node == 0 ? "host the ranks' store on " : "reach the ranks' store that node 0 hosts on ") +
             host + ":" + std::to_string(port) + ": " + what;
    return nullptr;
  }
}

}  // namespace ddprun
