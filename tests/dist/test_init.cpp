// init_process_group: environment parsing, init methods, backend choice and
// the errors users see for bad input.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <thread>

#include "ddp/dist.h"
#include "ddp/dist/device.h"
#include "dist/env.h"
#include "support/free_port.h"

namespace ddp {
namespace {

using Env = std::map<std::string, std::string>;

detail::EnvFn fake(const Env& env) {
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

detail::Rendezvous resolve(const Env& env, InitOptions o = {}, bool mpi = true) {
  return detail::resolve_rendezvous(o, fake(env), mpi);
}

template <typename Fn>
std::string invalid_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

TEST(Resolve, NoEnvironmentIsAWorldOfOneOnLocal) {
  auto r = resolve({});
  EXPECT_EQ(r.backend, "local");
  EXPECT_EQ(r.method, "none");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.timeout, std::chrono::minutes(10));
}

TEST(Resolve, LauncherEnvironmentGivesGlooOverTcp) {
  auto r = resolve({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29511"}});
  EXPECT_EQ(r.backend, "gloo");
  EXPECT_EQ(r.method, "env");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.host, "node0");
  EXPECT_EQ(r.port, 29511);
}

// Why auto chose (ddp::choose_backend, ddp-train's first line): each case's reason.
TEST(Resolve, BackendReasonSaysWhyAutoChose) {
  EXPECT_EQ(resolve({}).backend_reason, "auto: a world of one without a launcher");
  const Env launcher = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}};
  EXPECT_EQ(resolve(launcher).backend_reason, "auto: not started by mpirun");
  EXPECT_EQ(resolve(launcher, {}, /*mpi=*/false).backend_reason, "auto: not started by mpirun, no mpi backend built");
  auto ddprun = resolve({{"DDP_BACKEND", "mpi"}, {"DDP_BACKEND_REASON", "auto: one node, OpenMPI 4.1.4"}});
  EXPECT_EQ(ddprun.backend, "mpi");
  EXPECT_EQ(ddprun.backend_reason, "auto: one node, OpenMPI 4.1.4");
  Env gloo = launcher;
  gloo["DDP_BACKEND"] = "gloo";
  EXPECT_EQ(resolve(gloo).backend_reason, "DDP_BACKEND=gloo");
  EXPECT_EQ(resolve({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}}).backend_reason,
            "auto: started by mpirun");
  EXPECT_EQ(resolve({{"PMIX_RANK", "1"}}).backend_reason, "auto: started with PMI (srun --mpi=pmix or pmi2)");
  InitOptions given;
  given.backend = "gloo";
  EXPECT_EQ(resolve(gloo, given).backend_reason, "InitOptions::backend \"gloo\"");  // given beats DDP_BACKEND
}

TEST(Resolve, ExplicitRankAndWorldOverrideEnvironment) {
  InitOptions o;
  o.rank = 1;
  o.world_size = 3;
  auto r = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, o);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 3);
}

TEST(Resolve, DdpBackendAndMpiLauncherChooseTheBackend) {
  EXPECT_EQ(resolve({{"DDP_BACKEND", "mpi"}}).backend, "mpi");
  EXPECT_EQ(resolve({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}}).backend, "mpi");
  // Without MPI in the build, mpirun's variables still give rank and size to gloo.
  auto r = resolve(
      {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}}, {},
      /*mpi=*/false);
  EXPECT_EQ(r.backend, "gloo");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 2);
  auto slurm = resolve(
      {{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}}, {}, false);
  EXPECT_EQ(slurm.rank, 3);
  EXPECT_EQ(slurm.world_size, 4);
}

TEST(Resolve, TcpAndFileInitMethods) {
  InitOptions o;
  o.init_method = "tcp://10.1.2.3:4567";
  o.rank = 1;
  o.world_size = 2;
  auto r = resolve({}, o);
  EXPECT_EQ(r.method, "tcp");
  EXPECT_EQ(r.host, "10.1.2.3");
  EXPECT_EQ(r.port, 4567);
  o.init_method = "tcp://[::1]:80";
  EXPECT_EQ(resolve({}, o).host, "::1");
  o.init_method = "file:///tmp/ddp-rendezvous";
  r = resolve({}, o);
  EXPECT_EQ(r.method, "file");
  EXPECT_EQ(r.path, "/tmp/ddp-rendezvous");
}

TEST(Resolve, TimeoutFromOptionsOrEnvironment) {
  EXPECT_EQ(resolve({{"DDP_TIMEOUT", "2.5"}}).timeout, Milliseconds(2500));
  InitOptions o;
  o.timeout = Milliseconds(700);
  EXPECT_EQ(resolve({{"DDP_TIMEOUT", "2.5"}}, o).timeout, Milliseconds(700));
  EXPECT_NE(invalid_message([] { resolve({{"DDP_TIMEOUT", "soon"}}); }).find("DDP_TIMEOUT='soon'"), std::string::npos);
  EXPECT_NE(invalid_message([] { resolve({{"DDP_TIMEOUT", "inf"}}); }).find("DDP_TIMEOUT='inf'"), std::string::npos);
}

// First contact: DDP_RDZV_TIMEOUT, else the shorter of two minutes and the collective timeout.
TEST(Resolve, FirstContactHasItsOwnShorterDeadline) {
  const Env tcp = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> more) {
    Env e = tcp;
    for (auto& [k, v] : more) e[k] = v;
    return resolve(e);
  };
  auto r = with({});
  EXPECT_EQ(r.timeout, std::chrono::minutes(10));
  EXPECT_EQ(r.connect_timeout, std::chrono::minutes(2));
  EXPECT_EQ(r.connect_source, "the first-contact deadline");
  r = with({{"DDP_TIMEOUT", "30"}});
  EXPECT_EQ(r.connect_timeout, std::chrono::seconds(30));
  EXPECT_EQ(r.connect_source, "DDP_TIMEOUT");
  r = with({{"DDP_TIMEOUT", "30"}, {"DDP_RDZV_TIMEOUT", "900"}});
  EXPECT_EQ(r.connect_timeout, std::chrono::seconds(900));
  EXPECT_EQ(r.connect_source, "DDP_RDZV_TIMEOUT");
  for (const char* bad : {"0", "-1", "inf", "nan", "soon"})
    EXPECT_NE(invalid_message([&] {
                with({{"DDP_RDZV_TIMEOUT", bad}});
              }).find("DDP_RDZV_TIMEOUT='" + std::string(bad)),
              std::string::npos)
        << bad;
}

TEST(Resolve, BadEnvironmentNamesTheVariable) {
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
            }).find("RANK='one'"),
            std::string::npos);
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "0"}, {"WORLD_SIZE", "-2"}});
            }).find("WORLD_SIZE='-2'"),
            std::string::npos);
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
            }).find("MASTER_PORT"),
            std::string::npos);
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}});
            }).find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
            }).find("70000"),
            std::string::npos);
  EXPECT_NE(invalid_message([] { resolve({{"WORLD_SIZE", "2"}}); }).find("RANK"), std::string::npos);
  EXPECT_NE(invalid_message([] {
              resolve({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
            }).find("rank 2 is out of range [0, 2)"),
            std::string::npos);
  // A world of 0 is named as such, before MASTER_ADDR is asked for "a world of 0".
  const std::string zero = invalid_message([] { resolve({{"RANK", "0"}, {"WORLD_SIZE", "0"}}); });
  EXPECT_NE(zero.find("world_size 0 must be at least 1"), std::string::npos) << zero;
}

TEST(Resolve, BadInitMethodsAreExplained) {
  InitOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.init_method = "nccl://x";
  EXPECT_NE(invalid_message([&] { resolve({}, o); }).find("not supported"), std::string::npos);
  o.init_method = "tcp://hostonly";
  EXPECT_NE(invalid_message([&] { resolve({}, o); }).find("tcp://host:port"), std::string::npos);
  o.init_method = "file://relative/path";
  EXPECT_NE(invalid_message([&] { resolve({}, o); }).find("absolute"), std::string::npos);
  InitOptions no_rank;
  no_rank.init_method = "tcp://h:1";
  EXPECT_NE(invalid_message([&] { resolve({}, no_rank); }).find("needs rank and world_size"), std::string::npos);
}

// DDP_EXIT_LINGER (ddprun's mpi launch): seconds; malformed values are refused naming the variable.
TEST(Resolve, ExitLingerIsSecondsInRange) {
  unsetenv("DDP_EXIT_LINGER");
  EXPECT_EQ(detail::exit_linger_s(), 0.0);
  setenv("DDP_EXIT_LINGER", "0.5", 1);
  EXPECT_EQ(detail::exit_linger_s(), 0.5);
  for (const char* bad : {"-1", "61", "nan", "inf", "0.5s", "soon"}) {
    setenv("DDP_EXIT_LINGER", bad, 1);
    EXPECT_NE(invalid_message([] { detail::exit_linger_s(); }).find("DDP_EXIT_LINGER='" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  }
  unsetenv("DDP_EXIT_LINGER");
}

TEST(Backends, UnknownNameListsTheValidOnes) {
  std::string msg = invalid_message([] { create_backend("nvlink", {}); });
  EXPECT_NE(msg.find("unknown backend 'nvlink'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gloo, mpi, nccl, local"), std::string::npos) << msg;
  InitOptions o;
  o.backend = "nvlink";
  msg = invalid_message([&] { create_process_group(o); });
  EXPECT_NE(msg.find("valid backends"), std::string::npos) << msg;
}

// nccl where it cannot run: not built (a LibTorch without CUDA) or no GPU visible, each said so.
TEST(Backends, NcclWithoutAGpuSaysWhy) {
  if (is_backend_available("nccl")) GTEST_SKIP() << "a GPU is visible: the cuda tests cover nccl";
  try {
    create_backend("nccl", {});
    ADD_FAILURE() << "expected ddp::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(cuda_built() ? "no GPU is visible" : "not built into this ddp"), std::string::npos) << msg;
  }
}

TEST(Backends, RegistryListsWhatWasBuilt) {
  auto names = backend_names();
  EXPECT_EQ(names, (std::vector<std::string>{"gloo", "mpi", "nccl", "local"}));
  EXPECT_TRUE(is_backend_available("local"));
  auto avail = available_backends();
  EXPECT_NE(std::find(avail.begin(), avail.end(), "local"), avail.end());
}

TEST(DefaultGroup, WorldOfOneWithoutLauncher) {
  // The test runs without launcher variables: a world of one.
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_BACKEND", "OMPI_COMM_WORLD_SIZE",
                        "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS", "SLURM_PROCID"})
    unsetenv(v);
  EXPECT_FALSE(is_initialized());
  for (auto* fn : {&get_rank, &get_world_size}) {
    try {
      fn();
      ADD_FAILURE() << "expected ddp::Error before init_process_group";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not initialized; call ddp::init_process_group() first"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(default_group(), Error);
  auto g = init_process_group();
  EXPECT_TRUE(is_initialized());
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_world_size(), 1);
  EXPECT_EQ(g->backend(), "local");
  EXPECT_THROW(init_process_group(), Error);
  at::Tensor t = at::full({3}, 5.0);
  all_reduce(t, op(ReduceOp::SUM));
  EXPECT_TRUE(at::equal(t, at::full({3}, 5.0)));
  EXPECT_EQ(broadcast_object<std::string>("hello"), "hello");
  destroy_process_group();
  EXPECT_FALSE(is_initialized());
  // gloo explicitly, still with no environment: a world of one on gloo.
  InitOptions o;
  o.backend = "gloo";
  auto gg = create_process_group(o);
  EXPECT_EQ(gg->backend(), "gloo");
  EXPECT_EQ(gg->size(), 1);
  at::Tensor u = at::full({3}, 2.0);
  gg->all_reduce(u);
  EXPECT_TRUE(at::equal(u, at::full({3}, 2.0)));
}

// Ranks as threads meeting through tcp:// and file:// init methods.
void two_ranks(const std::string& method) {
  std::vector<double> results(2, -1);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      InitOptions o;
      o.backend = "gloo";
      o.init_method = method;
      o.rank = r;
      o.world_size = 2;
      o.timeout = std::chrono::seconds(30);
      auto g = create_process_group(o);
      at::Tensor t = at::full({2}, r + 1.0);
      g->all_reduce(t);
      results[r] = t[0].item<double>();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(results, (std::vector<double>{3.0, 3.0})) << method;
}

using ddp::test::free_port;

TEST(InitMethods, TcpRendezvous) { two_ranks("tcp://127.0.0.1:" + std::to_string(free_port())); }

TEST(InitMethods, FileRendezvous) {
  char dir[] = "/tmp/ddp-file-init-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  two_ranks(std::string("file://") + dir + "/store");
  std::remove((std::string(dir) + "/store").c_str());
  EXPECT_EQ(rmdir(dir), 0) << dir;
}

TEST(InitMethods, PortInUseNamesHostAndPort) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  InitOptions o;
  o.backend = "gloo";
  o.init_method = "tcp://127.0.0.1:" + std::to_string(port);
  o.rank = 0;
  o.world_size = 2;
  o.timeout = std::chrono::seconds(5);
  try {
    create_process_group(o);
    ADD_FAILURE() << "expected ddp::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[gloo] rank 0/2 init: cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("address already in use"), std::string::npos) << msg;
  }
  close(fd);
}

TEST(InitMethods, UnreachableStoreTimesOutWithAClearError) {
  InitOptions o;
  o.backend = "gloo";
  o.init_method = "tcp://127.0.0.1:" + std::to_string(free_port());
  o.rank = 1;
  o.world_size = 2;
  o.timeout = std::chrono::seconds(2);
  auto start = std::chrono::steady_clock::now();
  try {
    create_process_group(o);
    ADD_FAILURE() << "expected ddp::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach rank 0's store at 127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// Rank 2 of 3 never arrives: rank 0 names it; rank 1, waiting for rank 0's
// release, says so. 500 ms timeout; the deadline of a hang is the ctest timeout.
TEST(Timeouts, MonitoredBarrierNamesTheMissingRank) {
  StorePtr store = make_hash_store();
  std::vector<GroupPtr> groups(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      BackendOptions o;
      o.store = store;
      o.rank = r;
      o.world_size = 3;
      o.host = "127.0.0.1";
      o.timeout = std::chrono::seconds(60);
      groups[r] = create_backend("gloo", o);
    });
  for (auto& t : threads) t.join();
  threads.clear();
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        monitored_barrier(groups[r], Milliseconds(500), /*wait_all_ranks=*/true);
      } catch (const TimeoutError& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("not a TimeoutError: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "[gloo] rank 0/3 monitored_barrier: rank(s) 2 did not arrive within 500 ms");
  EXPECT_NE(errors[1].find("[gloo] rank 1/3 monitored_barrier: rank 0 did not release the barrier"), std::string::npos)
      << errors[1];
}

TEST(Timeouts, CollectiveThatNoPeerJoinsTimesOut) {
  StorePtr store = make_hash_store();
  std::thread peer;
  GroupPtr g0, g1;
  peer = std::thread([&] {
    BackendOptions o;
    o.store = store;
    o.rank = 1;
    o.world_size = 2;
    o.host = "127.0.0.1";
    o.timeout = std::chrono::seconds(10);
    g1 = create_backend("gloo", o);
  });
  BackendOptions o;
  o.store = store;
  o.rank = 0;
  o.world_size = 2;
  o.host = "127.0.0.1";
  o.timeout = std::chrono::seconds(10);
  g0 = create_backend("gloo", o);
  peer.join();
  at::Tensor t = at::ones({4});
  AllReduceOptions ao;
  ao.timeout = Milliseconds(300);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(g0->all_reduce(t, ao), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Let rank 1 join so that both groups can shut down cleanly.
  at::Tensor u = at::ones({4});
  try {
    g1->all_reduce(u, ao);
  } catch (const Error&) {
  }
}

}  // namespace
}  // namespace ddp
