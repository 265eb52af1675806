#include "rendezvous/rdzv_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "launch/net_check.h"
#include "output/output.h"

namespace ddprun {

namespace {

std::chrono::milliseconds to_ms(double s) { return std::chrono::milliseconds(static_cast<long long>(s * 1000)); }

// Runs each operation on a helper thread and waits at most op_timeout_s for it: a TCPStore client blocks in
// recv() when the host's link is cut. After a timeout the store is dead for good (the stuck thread keeps it).
class GuardedStore : public RdzvKV {
 public:
  GuardedStore(c10::intrusive_ptr<c10d::Store> store, std::string where, double op_timeout_s, std::string what)
      : state_(std::make_shared<State>()), where_(std::move(where)), what_(std::move(what)), timeout_s_(op_timeout_s) {
    state_->store = std::move(store);
  }

  int64_t add(const std::string& key, int64_t n) override {
    return call<int64_t>([key, n](c10d::Store& s) { return s.add(key, n); });
  }
  void set(const std::string& key, const std::string& value) override {
    call<int>([key, value](c10d::Store& s) {
      s.set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return 0;
    });
  }
  bool check(const std::string& key) override {
    return call<bool>([key](c10d::Store& s) { return s.check({key}); });
  }
  std::string get(const std::string& key) override {
    return call<std::string>([key](c10d::Store& s) {
      std::vector<uint8_t> v = s.get(key);
      return std::string(v.begin(), v.end());
    });
  }

 private:
  struct State {
    std::mutex mutex;  // one operation at a time on the store
    c10::intrusive_ptr<c10d::Store> store;
  };

  template <typename T, typename F>
  T call(F op) {
    if (dead_) throw RendezvousError(dead_message_);
    auto promise = std::make_shared<std::promise<T>>();
    std::future<T> result = promise->get_future();
    std::thread([state = state_, promise, op]() {
      std::lock_guard<std::mutex> lock(state->mutex);
      try {
        promise->set_value(op(*state->store));
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    }).detach();
    if (result.wait_for(to_ms(timeout_s_)) != std::future_status::ready) {
      dead_ = true;
      dead_message_ = what_ + " at " + where_ + " did not answer within " + seconds_text(timeout_s_) +
                      ": the agent hosting it is gone or the link to it is down";
      throw RendezvousError(dead_message_);
    }
    try {
      return result.get();
    } catch (const std::exception& e) {
      dead_ = true;
      std::string what = e.what();
      if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
      dead_message_ =
          "lost " + what_ + " at " + where_ + " (" + what + "): the agent hosting it exited or the link to it is down";
      throw RendezvousError(dead_message_);
    }
  }

  std::shared_ptr<State> state_;
  std::string where_;
  std::string what_;
  double timeout_s_;
  bool dead_ = false;
  std::string dead_message_;
};

}  // namespace

std::shared_ptr<RdzvKV> guard_store(c10::intrusive_ptr<c10d::Store> store, const std::string& where,
                                    double op_timeout_s, const std::string& what) {
  return std::make_shared<GuardedStore>(std::move(store), where, op_timeout_s, what);
}

RdzvStore open_rdzv_store(const std::string& host, int port, double connect_timeout_s, double op_timeout_s) {
  const std::string where = host + ":" + std::to_string(port);
  PortCheck check = check_port(host, port);
  if (check.result == PortCheck::kUnresolved)
    throw RendezvousError("cannot resolve the --rdzv-endpoint host '" + host + "': " + check.detail);
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.waitWorkers = false;
  o.timeout = to_ms(connect_timeout_s);
  RdzvStore out;
  c10::intrusive_ptr<c10d::Store> store;
  if (check.result == PortCheck::kFree) {  // our address, nobody serves it yet: host the store
    o.isServer = true;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(host, o);
      out.is_host = true;
    } catch (const std::exception&) {
      store = c10::intrusive_ptr<c10d::Store>();  // another agent on this machine was faster: connect to it
    }
  }
  if (!store) {
    o.isServer = false;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(host, o);
    } catch (const std::exception& e) {
      std::string what = e.what();
      if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
      throw RendezvousError("cannot reach the rendezvous store at " + where + " within " +
                            seconds_text(connect_timeout_s) + " (--rdzv-conf join_timeout): " + what +
                            "; start ddprun on the --rdzv-endpoint host too (it hosts the store)");
    }
  }
  out.kv = guard_store(std::move(store), where, op_timeout_s);
  return out;
}

}  // namespace ddprun
