// --nan-check on fits whose gradients turn NaN at a known step (a layer that multiplies its output by NaN on that
// training forward, on the last rank only), every strategy, worlds 1 to 3 (ranks as threads), gloo and nccl's
// contract, both readings of the check:
//   step:      the run stops before that step's update (the weights stay finite);
//   next-step: (a GPU's default) the result is read a step later, at the next update or at the epoch's end, so that
//              step's update is applied (the weights hold NaN), and no checkpoint is written after it.
// Either way every rank fails with the step and the first parameter named, and the latest checkpoint is the step
// before's (none without --checkpoint-every). Unset, the CPU reads at the step.
#include <gtest/gtest.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>

#include "ddp/errors.h"
#include "ddp/train/models/sequential_net.h"
#include "ddp/train/trainer.h"
#include "support/blobs.h"
#include "support/rank_threads.h"
#include "train/blobs_fit.h"
#include "train/test_files.h"
#include "train/trainer_job.h"

namespace ddp::train {
namespace {

// NaN times its input on its `at`-th training forward; itself otherwise. Counts its training forwards in `calls`.
class PoisonImpl : public torch::nn::Module {
 public:
  PoisonImpl(int64_t at, std::shared_ptr<int64_t> calls) : at_(at), calls_(std::move(calls)) {}
  at::Tensor forward(const at::Tensor& x) { return is_training() && ++*calls_ == at_ ? x * std::nan("") : x; }

 private:
  int64_t at_;
  std::shared_ptr<int64_t> calls_;
};
TORCH_MODULE(Poison);

struct Case {
  std::string strategy;
  int world;
  std::string at;  // --nan-check-at; "" unset
  std::string backend = "gloo";
  std::string name() const {
    std::string n = strategy + "_w" + std::to_string(world) + "_" + (at.empty() ? "unset" : at) +
                    (backend == "gloo" ? "" : "_" + backend);
    for (char& ch : n)
      if (ch == '-') ch = '_';
    return n;
  }
  bool next_step() const { return at == "next-step"; }
  bool sharded() const { return strategy.rfind("fsdp", 0) == 0; }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

constexpr int64_t kBatch = 8, kSteps = 4;

// The step the latest checkpoint in `dir` was written at (-1: none).
int64_t latest_step(const std::string& dir) {
  std::ifstream in(dir + "/checkpoints/latest");
  std::string name;
  if (!(in >> name)) return -1;
  std::smatch m;
  if (!std::regex_search(name, m, std::regex("-s0*([0-9]+)\\.pt$"))) return -1;
  return std::stoll(m[1]);
}

class NanCheck : public ::testing::TestWithParam<Case> {};

// With a checkpoint every step, the save after the poisoned step reads the check (next-step); with none within
// the epoch, the next step's update does (its forward and backward ran: one more forward than at the step), or the
// epoch's end for its last step.
TEST_P(NanCheck, StopsNamingTheStepAndNeverSavesItsUpdate) {
  const Case& c = GetParam();
  for (const int64_t every : {int64_t(1), int64_t(0)})
    for (const int64_t poisoned : {int64_t(2), kSteps}) {  // within the epoch; its last step
      SCOPED_TRACE(c.name() + ", NaN at step " + std::to_string(poisoned) + ", --checkpoint-every " +
                   std::to_string(every));
      test::TempDir dir;
      std::vector<Task> tasks(size_t(c.world));
      std::vector<std::shared_ptr<int64_t>> forwards;
      for (int r = 0; r < c.world; ++r) {
        Task& t = tasks[size_t(r)];
        at::manual_seed(3);
        forwards.push_back(std::make_shared<int64_t>(0));
        t.model = torch::nn::AnyModule(models::SequentialNet(torch::nn::Linear(8, 6),
                                                             Poison(r == c.world - 1 ? poisoned : 0, forwards.back()),
                                                             torch::nn::Tanh(), torch::nn::Linear(6, 4)));
        auto [x, y] = testing::blobs(kSteps * kBatch * c.world, 1);
        auto [tx, ty] = testing::blobs(24, 2);
        t.train = TensorData{x, y};
        t.test = TensorData{tx, ty};
      }
      std::vector<std::string> errors(size_t(c.world));
      std::vector<bool> finite(size_t(c.world));
      testing::run_ranks(c.backend, c.world, [&](ProcessGroup& g) {
        TrainConfig s = testing::blobs_fit(dir / "run", c.strategy, kBatch);
        s.checkpoint_every = every;
        s.log_every = 1000;
        s.nan_check_at = c.at;
        Task t = tasks[size_t(g.rank())];
        Trainer trainer(s, g.shared_from_this());
        try {
          trainer.fit(std::move(t));
        } catch (const Error& e) {
          errors[size_t(g.rank())] = e.what();
        }
        bool all = true;
        for (const auto& p : tasks[size_t(g.rank())].model.ptr()->parameters())
          all = all && at::isfinite(p).all().item<bool>();
        finite[size_t(g.rank())] = all;
      });
      const int64_t last = every ? poisoned - 1 : -1;  // the latest checkpoint's step (-1: none)
      EXPECT_EQ(latest_step(dir / "run"), last);
      const bool read_at_next_update = c.next_step() && every == 0 && poisoned < kSteps;
      for (int r = 0; r < c.world; ++r) {
        const std::string& e = errors[size_t(r)];
        EXPECT_EQ(*forwards[size_t(r)], poisoned + (read_at_next_update ? 1 : 0)) << "rank " << r << "'s forwards";
        EXPECT_NE(e.find("the gradients are not finite at epoch 1, step " + std::to_string(poisoned) +
                         " (this rank's loss " + (r == c.world - 1 ? "nan)" : "")),
                  std::string::npos)
            << "rank " << r << ": " << e;
        const std::string first = c.sharded() && !c.next_step() ? "a gradient of '0.weight' (nan)" : "0.weight (nan)";
        EXPECT_NE(e.find("; first non-finite gradient: " + first), std::string::npos) << "rank " << r << ": " << e;
        EXPECT_NE(e.find(c.next_step() ? "; its update was applied (--nan-check-at next-step reads the check a step "
                                         "later) and no checkpoint was written since (the last: "
                                       : "; the weights were not updated and no checkpoint was written (the last: "),
                  std::string::npos)
            << "rank " << r << ": " << e;
        char named[32];  // checkpoint-eEEEE-sSSSSSSSS.pt
        std::snprintf(named, sizeof named, "-s%08lld.pt)", static_cast<long long>(last));
        EXPECT_NE(e.find(every ? std::string(named) : std::string("(the last: none)")), std::string::npos)
            << "rank " << r << ": " << e;
        // A sharded model's parameters are its rows' until the fit's end: its weights are checked as DDP's only.
        if (!c.sharded()) EXPECT_EQ(finite[size_t(r)], !c.next_step()) << "rank " << r;
      }
    }
}

// Unset, the check is read a step later where a read waits for the device's queue (a GPU), unless the job recovers
// in place (ddprun --recovery inplace adopts the last step's weights: they must be known finite).
TEST(NanCheckAt, UnsetReadsAStepLaterOnAGpuOnly) {
  EXPECT_EQ(detail::default_nan_check_at(at::Device(at::kCUDA, 0), false), "next-step");
  EXPECT_EQ(detail::default_nan_check_at(at::Device(at::kCUDA, 1), true), "step");
  EXPECT_EQ(detail::default_nan_check_at(at::Device(at::kCPU), false), "step");
  EXPECT_EQ(detail::default_nan_check_at(at::Device(at::kCPU), true), "step");
}

INSTANTIATE_TEST_SUITE_P(Trainer, NanCheck,
                         ::testing::Values(Case{"ddp", 1, "step"}, Case{"ddp", 1, "next-step"}, Case{"ddp", 1, ""},
                                           Case{"ddp", 3, "step"}, Case{"ddp", 3, "next-step"},
                                           Case{"zero1", 2, "next-step"}, Case{"fsdp-full", 3, "step"},
                                           Case{"fsdp-full", 3, "next-step"}, Case{"fsdp-grad", 2, "next-step"},
                                           Case{"ddp", 2, "next-step", "nccl-standin"},
                                           Case{"fsdp-full", 2, "next-step", "nccl-standin"}),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

}  // namespace
}  // namespace ddp::train
