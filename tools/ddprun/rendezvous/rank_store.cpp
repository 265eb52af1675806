#include "rendezvous/rank_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>

#include "ddp/dist/membership_keys.h"

namespace ddprun {
namespace {

class HostedStore final : public RankStore {
 public:
  explicit HostedStore(c10::intrusive_ptr<c10d::TCPStore> store) : store_(std::move(store)) {}
  void mark_lost(int rank, pid_t pid, const std::string& how) override {
    try {
      int id = rank;
      const std::string registered = ddp::membership_keys::pid(static_cast<long>(pid));
      if (store_->check({registered})) {
        const std::vector<uint8_t> v = store_->get(registered);
        id = std::stoi(std::string(v.begin(), v.end()));
      }
      store_->set(ddp::membership_keys::lost(id), std::vector<uint8_t>(how.begin(), how.end()));
    } catch (const std::exception& e) {  // our own server: only a broken process gets here
      std::fprintf(stderr, "ddprun: warning: cannot mark rank %d lost in the ranks' store: %s\n", rank, e.what());
    }
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::unique_ptr<RankStore> host_rank_store(const std::string& host, int port, int world_size, std::string* error) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = true;
  o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(30);
  try {
    return std::make_unique<HostedStore>(c10::make_intrusive<c10d::TCPStore>(host, o));
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    *error = "--recovery inplace: cannot host the ranks' store on " + host + ":" + std::to_string(port) + ": " + what;
    return nullptr;
  }
}

}  // namespace ddprun
