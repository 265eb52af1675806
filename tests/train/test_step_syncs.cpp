// On a GPU, a read of a tensor's value or a copy to the host makes the host wait for the device; the Trainer's
// step path must have none (issue 45): losses and hits are summed on the device and read at log points, batches
// move non-blocking. Checked on the CPU with a counter of those calls (support/host_reads.h): fits of 2 and of 6
// steps per epoch make the same reads, so a step makes none (--nan-check-at next-step, a GPU's default, included:
// its reads wait for nothing queued after them, and come a step later); --nan-check-at step's one read per step and a
// log point's one copy show that the counter sees reads in the loop. Every strategy, worlds 1 and 3 (ranks as threads).
#include <gtest/gtest.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>
#include <mutex>

#include "ddp/train/models/sequential_net.h"
#include "ddp/train/trainer.h"
#include "support/blobs.h"
#include "support/host_reads.h"
#include "support/rank_threads.h"
#include "train/blobs_fit.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

struct Case {
  std::string strategy;
  int world;
  int64_t accumulate = 1;
  int64_t ema_every = 0;
  double clip_grad = 0;    // --clip-grad: on the device, its norm read only by --nan-check-at step
  bool nan_check = false;  // --nan-check-at next-step (a GPU's default): read a step later, without waiting
  std::string name() const {
    return strategy + "_w" + std::to_string(world) + (accumulate > 1 ? "_accumulate" : "") + (ema_every ? "_ema" : "") +
           (clip_grad > 0 ? "_clip" : "") + (nan_check ? "_nan_check_next_step" : "");
  }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

constexpr int64_t kBatch = 8;

// gloo, or DDP_STEP_SYNCS_BACKEND: scripts/device-check.sh runs the world-1 cases over nccl on a GPU, where the
// fits' --device auto takes the GPU, so the loop's reads are counted on a real device (gloo's staging of GPU
// tensors reads the host at every collective).
std::string backend() {
  const char* b = std::getenv("DDP_STEP_SYNCS_BACKEND");
  return b && *b ? b : "gloo";
}
constexpr int64_t kNoLogPoint = 1000;  // more steps than a fit here takes

// Each rank's reads (count, and what they were) over a one-epoch fit of `steps` optimizer steps.
std::vector<std::pair<int64_t, std::string>> reads_of_fit(const Case& c, int64_t steps, bool nan_check,
                                                          int64_t log_every) {
  test::TempDir dir;
  const int64_t samples = steps * c.accumulate * kBatch * c.world;
  std::vector<Task> tasks(size_t(c.world));
  for (auto& t : tasks) {  // built here: rank threads share the global generator
    at::manual_seed(3);
    t.model = torch::nn::AnyModule(
        models::SequentialNet(torch::nn::Linear(8, 6), torch::nn::Tanh(), torch::nn::Linear(6, 4)));
    auto [x, y] = testing::blobs(samples, 1);
    auto [tx, ty] = testing::blobs(24, 2);
    t.train = TensorData{x, y};
    t.test = TensorData{tx, ty};
  }
  std::vector<std::pair<int64_t, std::string>> reads(size_t(c.world));
  testing::run_ranks(backend(), c.world, [&](ProcessGroup& g) {
    TrainConfig s = testing::blobs_fit(dir / "run", c.strategy, kBatch);
    s.accumulate = c.accumulate;
    s.ema_every = c.ema_every;
    s.clip_grad = c.clip_grad;
    s.nan_check = nan_check;
    s.nan_check_at = "step";
    if (c.nan_check) {
      s.nan_check = true;
      s.nan_check_at = "next-step";
    }
    s.log_every = log_every;
    Trainer trainer(s, g.shared_from_this());
    Task t = std::move(tasks[size_t(g.rank())]);
    testing::HostReads counter;
    const TrainSummary done = trainer.fit(std::move(t));
    EXPECT_EQ(done.steps, steps) << c.name();
    reads[size_t(g.rank())] = {counter.count(), counter.describe()};
  });
  return reads;
}

class StepSyncs : public ::testing::TestWithParam<Case> {};

// The reads of a fit do not grow with its steps: a step reads nothing.
TEST_P(StepSyncs, AStepReadsNothingOnTheHost) {
  const Case& c = GetParam();
  const auto few = reads_of_fit(c, 2, false, kNoLogPoint), more = reads_of_fit(c, 6, false, kNoLogPoint);
  for (int r = 0; r < c.world; ++r)
    EXPECT_EQ(more[size_t(r)].first, few[size_t(r)].first)
        << c.name() << " rank " << r << ": 4 more steps made " << more[size_t(r)].first - few[size_t(r)].first
        << " more host reads (2 steps: " << few[size_t(r)].second << "; 6 steps: " << more[size_t(r)].second << ")";
}

// The counter sees the loop's reads: --nan-check reads once per step (whether to step; with --clip-grad, the
// norm), a log point copies the running sums to the host once.
// (FSDP's --nan-check reads once per unit: not in this list.)
class StepSyncsCounted : public ::testing::TestWithParam<Case> {};

TEST_P(StepSyncsCounted, TheCounterSeesTheReadsTheLoopMakes) {
  const Case& c = GetParam();
  const auto few = reads_of_fit(c, 2, true, kNoLogPoint), more = reads_of_fit(c, 6, true, kNoLogPoint);
  const auto logged_few = reads_of_fit(c, 2, false, 1), logged_more = reads_of_fit(c, 6, false, 1);
  for (int r = 0; r < c.world; ++r) {
    EXPECT_EQ(more[size_t(r)].first - few[size_t(r)].first, 4) << c.name() << " rank " << r << " with --nan-check";
    EXPECT_EQ(logged_more[size_t(r)].first - logged_few[size_t(r)].first, 4)
        << c.name() << " rank " << r << " with --log-every 1: " << logged_more[size_t(r)].second;
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string n = i.param.name();
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Trainer, StepSyncs,
                         ::testing::Values(Case{"ddp", 1}, Case{"ddp", 3}, Case{"ddp", 2, 2}, Case{"ddp", 1, 1, 1},
                                           Case{"zero1", 3}, Case{"fsdp-full", 3}, Case{"fsdp-grad", 1},
                                           Case{"fsdp-grad", 2}, Case{"ddp", 3, 1, 0, 1.0},
                                           Case{"fsdp-full", 3, 1, 0, 1.0}, Case{"ddp", 1, 1, 0, 0, true},
                                           Case{"ddp", 3, 1, 0, 1.0, true}, Case{"zero1", 2, 1, 0, 0, true},
                                           Case{"fsdp-full", 3, 1, 0, 1.0, true}, Case{"fsdp-grad", 2, 1, 0, 0, true}),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Trainer, StepSyncsCounted,
                         ::testing::Values(Case{"ddp", 1}, Case{"ddp", 3}, Case{"zero1", 2}, Case{"ddp", 2, 1, 0, 1.0}),
                         case_name);

}  // namespace
}  // namespace ddp::train
