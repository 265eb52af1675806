#include "support/rank_threads.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ddp::testing {

void run_ranks(const std::string& backend, int world, const std::function<void(ProcessGroup&)>& fn,
               Milliseconds timeout) {
  StorePtr store = make_hash_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        BackendOptions o;
        o.store = store;
        o.rank = r;
        o.world_size = world;
        o.timeout = timeout;
        o.host = "127.0.0.1";
        GroupPtr g = create_backend(backend, o);
        fn(*g);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << "/" << world << " threw: " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace ddp::testing
