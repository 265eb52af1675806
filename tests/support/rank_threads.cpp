#include "support/rank_threads.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "support/nccl_standin.h"

namespace ddp::testing {

void run_ranks(const std::string& backend, int world, const std::function<void(ProcessGroup&)>& fn,
               Milliseconds timeout) {
  StorePtr store = make_hash_store();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<char> done(world, 0);
  int finished = 0;
  // Every group lives until all ranks are done: a rank whose case needs no communication (an
  // op the backend refuses) must not close its connections while a peer is still connecting.
  std::vector<GroupPtr> groups(world);
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
        groups[r] = backend == "nccl-standin" ? make_nccl_standin(o) : create_backend(backend, o);
        fn(*groups[r]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << "/" << world << " threw: " << e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      done[r] = 1;
      ++finished;
      cv.notify_all();
    });
  }
  // Watchdog: ranks that outlive twice their timeout are stuck; fail loudly
  // instead of letting the test hang (a thread cannot be cancelled).
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout * 2, [&] { return finished == world; })) {
      std::string stuck;
      for (int r = 0; r < world; ++r)
        if (!done[r]) stuck += " " + std::to_string(r);
      std::fprintf(stderr, "run_ranks: %s world %d: rank(s)%s still running after %lld ms; aborting\n", backend.c_str(),
                   world, stuck.c_str(), static_cast<long long>(timeout.count() * 2));
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  groups.clear();
}

}  // namespace ddp::testing
