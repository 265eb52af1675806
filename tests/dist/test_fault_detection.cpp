// Rank-side fault detection, in one process: the heartbeat's settings and
// messages, the job id at rendezvous, the call check (default and DDP_DEBUG=DETAIL) and
// DDP's bucket check (ranks as threads). Across processes: test_failures.cpp.
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>

#include "ddp/dist.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "dist/agreement.h"
#include "dist/heartbeat.h"
#include "dist/job_id.h"
#include "dist/wait_report.h"
#include "support/rank_threads.h"
#include "support/scoped_env.h"

namespace ddp {
namespace {

using ddp::test::ScopedEnv;

TEST(FaultDetection, SecondsAreNeverRoundedToZero) {
  EXPECT_EQ(detail::format_seconds(0.5), "0.5");
  EXPECT_EQ(detail::format_seconds(0.001), "0.001");
  EXPECT_EQ(detail::format_seconds(1.25), "1.25");
  EXPECT_EQ(detail::format_seconds(2.04), "2.04");
  EXPECT_EQ(detail::format_seconds(30), "30");
  EXPECT_EQ(detail::format_seconds(600), "600");
  EXPECT_EQ(detail::format_bytes(8), "8 B");
  EXPECT_EQ(detail::format_bytes(4000), "3.9 KiB");
  EXPECT_EQ(detail::format_bytes(4 << 20), "4.0 MiB");
}

TEST(FaultDetection, HeartbeatTimeoutFromOptionsThenEnvironment) {
  {
    ScopedEnv e("DDP_HEARTBEAT_TIMEOUT", nullptr);
    EXPECT_EQ(detail::resolve_heartbeat_timeout(Milliseconds(-1)), std::chrono::seconds(30));
    EXPECT_EQ(detail::resolve_heartbeat_timeout(Milliseconds(1500)), Milliseconds(1500));
  }
  {
    ScopedEnv e("DDP_HEARTBEAT_TIMEOUT", "0.5");
    EXPECT_EQ(detail::resolve_heartbeat_timeout(Milliseconds(-1)), Milliseconds(500));
    EXPECT_EQ(detail::resolve_heartbeat_timeout(Milliseconds(0)), Milliseconds(0));  // the option wins
  }
  {
    ScopedEnv e("DDP_HEARTBEAT_TIMEOUT", "0");
    EXPECT_EQ(detail::resolve_heartbeat_timeout(Milliseconds(-1)), Milliseconds(0));
  }
  for (const char* bad : {"abc", "-1", "2s"}) {
    ScopedEnv e("DDP_HEARTBEAT_TIMEOUT", bad);
    try {
      detail::resolve_heartbeat_timeout(Milliseconds(-1));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidArgument& ex) {
      EXPECT_EQ(std::string(ex.what()),
                std::string("[init] DDP_HEARTBEAT_TIMEOUT='") + bad +
                    "' must be a number of seconds >= 0 (at most 1e7; 0 turns the heartbeat off)");
    }
  }
}

TEST(FaultDetection, StoreOfAnotherJobIsRefused) {
  StorePtr store = make_hash_store();
  detail::Rendezvous r;
  r.backend = "gloo";
  r.method = "env";
  r.world_size = 2;
  r.host = "127.0.0.1";
  r.port = 29500;
  {
    ScopedEnv e("TORCHELASTIC_RUN_ID", "abc");
    r.rank = 0;
    detail::check_job_id(*store, r);
    r.rank = 1;
    detail::check_job_id(*store, r);  // the same job: accepted
  }
  ScopedEnv e("TORCHELASTIC_RUN_ID", "xyz");
  try {
    detail::check_job_id(*store, r);
    ADD_FAILURE() << "a rank of job xyz joined job abc's store";
  } catch (const Error& ex) {
    EXPECT_EQ(std::string(ex.what()),
              "[gloo] rank 1/2 init: the store at 127.0.0.1:29500 belongs to job 'abc', not to this job 'xyz': "
              "another job is using MASTER_PORT 29500; choose another port");
  }
  ScopedEnv unset("TORCHELASTIC_RUN_ID", nullptr);
  EXPECT_EQ(detail::job_id(), "none");
}

TEST(FaultDetection, FingerprintDescribesTheCall) {
  detail::Call c{ErrorContext{"gloo", 0, 2, "all_reduce"}, Milliseconds(1000), false};
  c.op = OpType::kAllReduce;
  c.seq = 7;
  at::Tensor f = detail::fingerprint(c, at::zeros({2, 3}), static_cast<int>(ReduceOp::SUM), -1);
  EXPECT_EQ(detail::describe_fingerprint(f.data_ptr<int64_t>()), "#7 all_reduce float32[2, 3] SUM");
  c.op = OpType::kBroadcast;
  f = detail::fingerprint(c, at::zeros({5}, at::kLong), -1, 1);
  EXPECT_EQ(detail::describe_fingerprint(f.data_ptr<int64_t>()), "#7 broadcast int64[5] root 1");
  c.op = OpType::kBarrier;
  f = detail::fingerprint(c, at::Tensor(), -1, -1);
  EXPECT_EQ(detail::describe_fingerprint(f.data_ptr<int64_t>()), "#7 barrier");
}

// The level DDP_DEBUG (else TORCH_DISTRIBUTED_DEBUG) asks for, and where the default applies.
TEST(FaultDetection, CallCheckLevelComesFromTheEnvironment) {
  ScopedEnv torch_var("TORCH_DISTRIBUTED_DEBUG", nullptr);
  {
    ScopedEnv e("DDP_DEBUG", nullptr);
    EXPECT_EQ(detail::default_call_check(true), CallCheck::kHash);
    EXPECT_EQ(detail::default_call_check(false), CallCheck::kOff);  // nccl: the host would wait for the GPU
  }
  for (auto [value, level] : {std::pair{"off", CallCheck::kOff}, std::pair{"INFO", CallCheck::kHash},
                              std::pair{"Detail", CallCheck::kDetail}}) {
    ScopedEnv e("DDP_DEBUG", value);
    EXPECT_EQ(detail::default_call_check(true), level) << value;
  }
  {
    ScopedEnv e("DDP_DEBUG", "DETAIL");
    EXPECT_EQ(detail::default_call_check(false), CallCheck::kDetail);  // asked for: on any backend
  }
  {
    ScopedEnv e("DDP_DEBUG", nullptr), t("TORCH_DISTRIBUTED_DEBUG", "OFF");
    EXPECT_EQ(detail::default_call_check(true), CallCheck::kOff);
  }
  {
    ScopedEnv e("DDP_DEBUG", "INFO"), t("TORCH_DISTRIBUTED_DEBUG", "DETAIL");  // DDP_DEBUG first
    EXPECT_EQ(detail::default_call_check(true), CallCheck::kHash);
  }
  ScopedEnv e("DDP_DEBUG", "verbose");
  try {
    detail::default_call_check(true);
    ADD_FAILURE() << "DDP_DEBUG=verbose accepted";
  } catch (const InvalidArgument& ex) {
    EXPECT_EQ(std::string(ex.what()).substr(0, 73),
              "[init] DDP_DEBUG='verbose' must be one of OFF, INFO or DETAIL: OFF (ranks");
  }
}

// With the default check (a hash) and under DDP_DEBUG=DETAIL, rank 0 reducing float32[8] while the others reduce
// float32[66902] fails on every rank, naming both views; calls that agree pass. gloo, worlds 1-4 (mpi: across
// processes, Agreement.MismatchIsNamedAcrossProcesses; local is a world of one).
TEST(FaultDetection, MismatchedCollectivesAreNamedOnEveryRank) {
  ScopedEnv torch_var("TORCH_DISTRIBUTED_DEBUG", nullptr);
  for (const char* level : {"", "DETAIL", "TORCH_DISTRIBUTED_DEBUG=DETAIL"}) {
    const bool torch = std::string(level).rfind("TORCH", 0) == 0;
    ScopedEnv e(torch ? "TORCH_DISTRIBUTED_DEBUG" : "DDP_DEBUG", torch ? "DETAIL" : level);
    const bool detail = *level != 0;
    for (const char* backend : {"gloo"}) {
      for (int world = 1; world <= 4; ++world) {
        testing::run_ranks(backend, world, [&](ProcessGroup& g) {
          EXPECT_EQ(g.call_check(), detail ? CallCheck::kDetail : CallCheck::kHash);
          at::Tensor ok = at::ones({3});
          g.all_reduce(ok);  // #1 agrees
          g.barrier();       // #2 agrees
          EXPECT_EQ(ok[0].item<float>(), world);
          at::Tensor t = at::ones({g.rank() == 0 ? 8 : 66902});
          if (world == 1) {
            g.all_reduce(t);
            return;
          }
          std::string expected = "[" + std::string(backend) + "] rank " + std::to_string(g.rank()) + "/" +
                                 std::to_string(world) +
                                 " all_reduce: ranks disagree on collective #3: rank 0: #3 all_reduce float32[8] SUM";
          for (int r = 1; r < world; ++r)
            expected += "; rank " + std::to_string(r) + ": #3 all_reduce float32[66902] SUM";
          expected += detail ? " (DDP_DEBUG=DETAIL compares every collective; "
                             : " (ranks compare a hash of every collective first; DDP_DEBUG=OFF turns that off; ";
          try {
            g.all_reduce(t);
            ADD_FAILURE() << "no error on rank " << g.rank();
          } catch (const Error& ex) {
            EXPECT_EQ(std::string(ex.what()).substr(0, expected.size()), expected) << ex.what();
          }
        });
      }
    }
  }
}

// A rank that skips a collective: the next call it makes is compared with the others' skipped one (op and
// sequence number), so the mismatch is named, not a hang; set_call_check(kOff) turns the check off.
TEST(FaultDetection, ASkippedCollectiveIsNamedAndTheCheckCanBeTurnedOff) {
  ScopedEnv e("DDP_DEBUG", nullptr), t("TORCH_DISTRIBUTED_DEBUG", nullptr);
  testing::run_ranks("gloo", 3, [&](ProcessGroup& g) {
    at::Tensor x = at::ones({4});
    g.set_call_check(CallCheck::kOff);
    g.all_reduce(x);  // unchecked, alike on every rank
    g.set_call_check(CallCheck::kHash);
    EXPECT_EQ(x[0].item<float>(), 3);
    try {
      if (g.rank() != 1) g.broadcast(x);  // rank 1 skips it
      g.barrier();
      ADD_FAILURE() << "no error on rank " << g.rank();
    } catch (const Error& ex) {
      const std::string expected = "[gloo] rank " + std::to_string(g.rank()) +
                                   (g.rank() == 1 ? "/3 barrier" : "/3 broadcast") +
                                   ": ranks disagree on collective #2: rank 0: #2 broadcast float32[4] root 0; "
                                   "rank 1: #2 barrier (";
      EXPECT_EQ(std::string(ex.what()).substr(0, expected.size()), expected) << ex.what();
    }
  });
}

// DDP compares bucket layouts on the first backward: ranks that
// built different buckets (here: different bucket_cap_mb) fail, naming them.
TEST(FaultDetection, DdpNamesRanksWithDifferentBuckets) {
  for (int world = 2; world <= 4; ++world) {
    testing::run_ranks("gloo", world, [&](ProcessGroup& g) {
      torch::nn::Linear net(torch::nn::LinearOptions(64, 32));
      DDPOptions o;
      o.group = g.shared_from_this();
      o.first_bucket_cap_mb = o.bucket_cap_mb = g.rank() == world - 1 ? 1e-6 : 25;  // one bucket, or one per parameter
      DistributedDataParallel<torch::nn::Linear> model(net, o);
      // Compared in the first forward that synchronises, before any bucket is reduced.
      std::string expected = "[gloo] rank " + std::to_string(g.rank()) + "/" + std::to_string(world) +
                             " DistributedDataParallel forward: ranks disagree on the gradient buckets: "
                             "rank 0: 1 bucket: Float[2080]; rank " +
                             std::to_string(world - 1) + ": 2 buckets: Float[32], Float[2048]";
      try {
        model(at::ones({2, 64}));
        ADD_FAILURE() << "no error on rank " << g.rank();
      } catch (const std::exception& ex) {
        EXPECT_NE(std::string(ex.what()).find(expected), std::string::npos) << ex.what();
      }
    });
  }
}

}  // namespace
}  // namespace ddp
