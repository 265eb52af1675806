// --nan-check on fits whose gradients turn NaN at a known step (a layer that multiplies its output by NaN on that
// training forward, on the last rank only), every strategy, worlds 1 to 3 (ranks as threads), gloo and nccl's
// contract, both readings of the check:
//   step:      the run stops before that step's update (the weights stay finite);
//   next-step: (a GPU's default) the result is read a step later, at the next update or at the epoch's end, so that
//              step's update is applied (the weights hold NaN), and no checkpoint is written after it.
// Either way every rank fails with the step and the first parameter named, and the latest checkpoint is the step
// before's. Unset, the CPU reads at the step.
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
#include "train/test_files.h"

namespace ddp::train {
namespace {

// NaN times its input on its `at`-th training forward; itself otherwise.
class PoisonImpl : public torch::nn::Module {
 public:
  explicit PoisonImpl(int64_t at) : at_(at) {}
  at::Tensor forward(const at::Tensor& x) { return is_training() && ++calls_ == at_ ? x * std::nan("") : x; }

 private:
  int64_t at_, calls_ = 0;
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

TEST_P(NanCheck, StopsNamingTheStepAndNeverSavesItsUpdate) {
  const Case& c = GetParam();
  for (const int64_t poisoned : {int64_t(2), kSteps}) {  // within the epoch; its last step (read at the end)
    SCOPED_TRACE(c.name() + ", NaN at step " + std::to_string(poisoned));
    test::TempDir dir;
    std::vector<Task> tasks(size_t(c.world));
    for (int r = 0; r < c.world; ++r) {
      Task& t = tasks[size_t(r)];
      at::manual_seed(3);
      t.model =
          torch::nn::AnyModule(models::SequentialNet(torch::nn::Linear(8, 6), Poison(r == c.world - 1 ? poisoned : 0),
                                                     torch::nn::Tanh(), torch::nn::Linear(6, 4)));
      auto [x, y] = testing::blobs(kSteps * kBatch * c.world, 1);
      auto [tx, ty] = testing::blobs(24, 2);
      t.train = TensorData{x, y};
      t.test = TensorData{tx, ty};
    }
    std::vector<std::string> errors(size_t(c.world));
    std::vector<bool> finite(size_t(c.world));
    testing::run_ranks(c.backend, c.world, [&](ProcessGroup& g) {
      TrainConfig s;
      s.recipe = "blobs";
      s.out_dir = dir / "run";
      s.epochs = 1;
      s.batch_size = kBatch;
      s.progress = false;
      s.lr = 0.1;
      s.strategy = c.strategy;
      s.checkpoint_every = 1;
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
    EXPECT_EQ(latest_step(dir / "run"), poisoned - 1);
    for (int r = 0; r < c.world; ++r) {
      const std::string& e = errors[size_t(r)];
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
      char last[32];
      std::snprintf(last, sizeof last, "-s%08lld.pt)",
                    static_cast<long long>(poisoned - 1));  // checkpoint-eEEEE-sSSSSSSSS.pt
      EXPECT_NE(e.find(last), std::string::npos) << "rank " << r << ": " << e;
      // A sharded model's parameters are its rows' until the fit's end: its weights are checked as DDP's only.
      if (!c.sharded()) EXPECT_EQ(finite[size_t(r)], !c.next_step()) << "rank " << r;
    }
  }
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
