// The Trainer's parts on their own (src/train/fit_parts.h): the evaluator on three
// ranks, against the closed-form result over the whole test set; the epoch loop and the
// checkpoint policy on Jobs that set_up builds, under ddp and fsdp-full.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <fstream>
#include <mutex>

#include "ddp/errors.h"
#include "ddp/train/ema.h"
#include "ddp/train/models/sequential_net.h"
#include "support/blobs.h"
#include "support/rank_threads.h"
#include "train/fit_parts.h"
#include "train/test_files.h"

namespace ddp::train::detail {
namespace {

// A bias-free Linear(2 -> 3) with the given weights.
torch::nn::Linear linear(const at::Tensor& weight) {
  torch::nn::Linear m(torch::nn::LinearOptions(2, 3).bias(false));
  at::NoGradGuard no_grad;
  m->weight.copy_(weight);
  return m;
}

// 10 test samples over 3 ranks (4, 3, 3); each rank's Job holds its share, as set_up leaves it.
Job job_of(ProcessGroup& g, const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight) {
  Job j;
  j.group = g.shared_from_this();
  j.cfg.eval_batch = 2;  // several batches per rank
  const int64_t begin[] = {0, 4, 7, 10};
  Task t;
  t.test = TensorData::shard(x.slice(0, begin[g.rank()], begin[g.rank() + 1]),
                             y.slice(0, begin[g.rank()], begin[g.rank() + 1]), 10);
  j.evaluator = Evaluator(t, j.cfg, g);
  j.task.model = torch::nn::AnyModule(linear(weight));
  StrategyParts parts{j.task.model, j.group, nullptr, [&j] {
                        return std::make_unique<torch::optim::SGD>(j.task.model.ptr()->parameters(),
                                                                   torch::optim::SGDOptions(0.1));
                      }};
  j.strategy = make_strategy("ddp", std::move(parts));
  return j;
}

TEST(Evaluator, EveryRanksShareMakesTheWholeSetsResult) {
  const at::Tensor x = at::arange(20, at::kFloat).reshape({10, 2}).div(10).sub(0.9);
  const at::Tensor y = at::tensor({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, at::kLong);
  const at::Tensor w = at::tensor({1.0, -1.0, 0.5, 0.5, -1.0, 1.0}, at::kFloat).reshape({3, 2});
  const at::Tensor shadow_w = at::tensor({0.0, 1.0, 1.0, 0.0, -0.5, -0.5}, at::kFloat).reshape({3, 2});
  // The whole set on one process: what three ranks' shares must add up to.
  auto expected = [&](const at::Tensor& weight) {
    const at::Tensor logits = at::matmul(x, weight.t());
    return std::make_pair(at::cross_entropy_loss(logits, y).item<double>(),
                          logits.argmax(1).eq(y).sum().item<double>() / 10.0);
  };
  const auto [loss, acc1] = expected(w);
  const auto [shadow_loss, shadow_acc1] = expected(shadow_w);
  ASSERT_NE(acc1, shadow_acc1);  // the two models are told apart
  testing::run_ranks("gloo", 3, [&](ProcessGroup& g) {
    Job j = job_of(g, x, y, w);
    EvalResult r = evaluate_model(j);
    EXPECT_EQ(r.count, 10);
    EXPECT_DOUBLE_EQ(r.acc1, acc1);
    // float32 logits, 10 per-sample losses summed over 3 ranks: well under 1e-5 relative.
    EXPECT_NEAR(r.loss, loss, 1e-5 * std::abs(loss));
    // With a separate weight average (EMA), the average is what is evaluated.
    WeightAverage average;
    average.make_shadow = [&] { return torch::nn::AnyModule(linear(shadow_w)); };
    average.rho = 0.5;
    j.average = Averager(average, 1, *linear(shadow_w), j.device);
    r = evaluate_model(j);
    EXPECT_DOUBLE_EQ(r.acc1, shadow_acc1);
    EXPECT_NEAR(r.loss, shadow_loss, 1e-5 * std::abs(shadow_loss));
    EXPECT_NE(eval_text(r).find("acc1 " + percent(shadow_acc1)), std::string::npos) << eval_text(r);
  });
}

using testing::blobs;

// What Trainer::fit does before its loop, on a 2-layer SequentialNet: 192 samples, batch 16 on 2 ranks,
// so 6 steps an epoch.
void make_job(Job& j, ProcessGroup& g, const std::string& dir, const std::string& strategy,
              int64_t checkpoint_every = 0) {
  TrainConfig cfg;
  cfg.checkpoint_every = checkpoint_every;
  cfg.out_dir = dir;
  cfg.epochs = 2;
  cfg.batch_size = 16;
  cfg.lr = 0.1;
  cfg.momentum = 0.9;
  cfg.progress = false;
  cfg.strategy = strategy;
  Task t;
  t.name = "blobs";
  {
    static std::mutex generator;  // the ranks' threads share the global generator
    std::lock_guard<std::mutex> lock(generator);
    at::manual_seed(3);
    t.model = torch::nn::AnyModule(
        models::SequentialNet(torch::nn::Linear(8, 6), torch::nn::Tanh(), torch::nn::Linear(6, 4)));
  }
  auto [x, y] = blobs(192, 1);
  auto [tx, ty] = blobs(40, 2);
  t.train = TensorData{x, y};
  t.test = TensorData{tx, ty};
  fill_task_defaults(cfg, t);
  check_settings(cfg);
  j.device = resolve_job_device(cfg.device, g);
  j.precision = decide_precision(cfg.precision, false, g, j.device);
  j.cfg = cfg;
  j.group = g.shared_from_this();
  j.logs.console().set_leader(g.rank() == 0);
  set_up(j, std::move(t));
}

// A Job as a --resume run makes it, and where it resumes.
LoopState resume(Job& j, ProcessGroup& g, const std::string& dir, const std::string& strategy) {
  make_job(j, g, dir, strategy);
  j.cfg.resume = true;
  return resume_or_start(j);
}

at::Tensor weights_of(Job& j) {
  auto full = j.strategy->full_model(false);
  std::vector<at::Tensor> ps;
  for (const auto& p : j.task.model.ptr()->parameters()) ps.push_back(p.detach().flatten().clone());
  return at::cat(ps);
}

const char* const kStrategies[] = {"ddp", "fsdp-full"};

// An epoch run from a mid-epoch checkpoint (resume_or_start: the micro-batch to go on from) ends with the
// uninterrupted epoch's weights, bit for bit: the loop skips what was done, the policy restores everything.
TEST(EpochLoop, AnEpochResumedMidWayEndsAsTheWholeEpoch) {
  for (const std::string strategy : kStrategies) {
    test::TempDir whole, split;
    std::vector<at::Tensor> expected(2), got(2);
    testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
      Job j;
      make_job(j, g, whole / "run", strategy);
      LoopState s = resume_or_start(j);
      train_epoch(j, s);
      EXPECT_EQ(s.step, 6) << strategy;
      EXPECT_EQ(s.micro, 6) << strategy;
      expected[size_t(g.rank())] = weights_of(j);
    });
    testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
      {
        Job j;
        make_job(j, g, split / "run", strategy,
                 4);  // a checkpoint after step 4 of 6 (the epoch's end is the fit loop's)
        LoopState s = resume_or_start(j);
        train_epoch(j, s);
      }
      Job j;
      LoopState s = resume(j, g, split / "run", strategy);
      EXPECT_EQ(s.step, 4) << strategy;
      EXPECT_EQ(s.micro, 4) << strategy;
      train_epoch(j, s);
      EXPECT_EQ(s.step, 6) << strategy;
      got[size_t(g.rank())] = weights_of(j);
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(at::equal(got[size_t(r)], expected[size_t(r)]))
          << strategy << " rank " << r << ": " << (got[size_t(r)] - expected[size_t(r)]).abs().max().item<double>();
  }
}

// The policy decides when: at every epoch's end and on preemption; within an epoch each --checkpoint-every
// steps, but not at the epoch's last step (its end saves), and never with checkpoint_every 0.
TEST(CheckpointPolicy, SavesAtEpochEndsOnPreemptionAndEveryNStepsWithin) {
  test::TempDir dir;
  TrainConfig cfg;
  cfg.out_dir = dir / "run";
  cfg.checkpoint_every = 4;
  const Checkpoints every4(cfg, nullptr, /*micro_per_epoch=*/12);
  cfg.checkpoint_every = 0;
  const Checkpoints ends_only(cfg, nullptr, 12);
  auto at = [](int64_t step, int64_t micro) {
    LoopState s;
    s.step = step;
    s.micro = micro;
    return s;
  };
  std::vector<int64_t> saved;
  for (int64_t step = 1; step <= 24; ++step)
    if (every4.due(at(step, (step - 1) % 12 + 1), Moment::kStep)) saved.push_back(step);
  EXPECT_EQ(saved, (std::vector<int64_t>{4, 8, 16, 20}));  // 12 and 24 end an epoch
  EXPECT_FALSE(ends_only.due(at(4, 4), Moment::kStep));
  for (const Checkpoints* policy : {&every4, &ends_only}) {
    EXPECT_TRUE(policy->due(at(3, 3), Moment::kPreempted));
    EXPECT_TRUE(policy->due(at(12, 0), Moment::kEpochEnd));
  }
}

// The checkpoint policy: a resume takes the newest checkpoint every rank can read (a corrupt newest one is
// skipped for the one before), restoring the weights; a non-finite model is never saved.
TEST(CheckpointPolicy, ACorruptNewestIsSkippedAndANonFiniteModelNeverSaved) {
  for (const std::string strategy : kStrategies) {
    test::TempDir dir;
    std::vector<at::Tensor> saved(2);
    std::string older, newer;
    testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
      Job j;
      make_job(j, g, dir / "run", strategy);
      LoopState s = resume_or_start(j);
      train_epoch(j, s);
      s.epoch = 1;  // as the fit loop leaves it after the epoch
      s.micro = 0;
      save_checkpoint(j, s);
      saved[size_t(g.rank())] = weights_of(j);
      if (g.rank() == 0) older = j.checkpoints.last();
      s.epoch = 2;  // a second checkpoint of other weights, made corrupt below
      {
        auto full = j.strategy->full_model(/*writeback=*/true);
        at::NoGradGuard no_grad;
        j.task.model.ptr()->parameters()[0].add_(1.0);
      }
      save_checkpoint(j, s);
      if (g.rank() == 0) newer = j.checkpoints.last();
      // A NaN weight (on every rank: FSDP's whole model, DDP's copies): refused before anything is written.
      {
        auto full = j.strategy->full_model(/*writeback=*/true);
        at::NoGradGuard no_grad;
        j.task.model.ptr()->parameters()[0].view(-1)[1] = std::nan("");
      }
      s.step = 7;
      try {
        save_checkpoint(j, s);
        ADD_FAILURE() << strategy << ": a non-finite model was saved";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the model is not finite after epoch 2, step 7: 0.weight (nan); no "
                                             "checkpoint written, the last one is " +
                                             j.checkpoints.last()),
                  std::string::npos)
            << e.what();
      }
    });
    {
      std::ifstream in(dir / "run/checkpoints/latest");
      std::string latest;
      in >> latest;
      EXPECT_NE(newer.find(latest), std::string::npos) << strategy << ": latest is " << latest << ", not " << newer;
      std::fstream f(newer, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(60);
      f << "corrupt";  // inside the first record: the zip's CRC-32 no longer matches
    }
    testing::run_ranks("gloo", 2, [&](ProcessGroup& g) {
      Job j;
      const LoopState s = resume(j, g, dir / "run", strategy);
      EXPECT_EQ(s.epoch, 1) << strategy;
      EXPECT_EQ(s.step, 6) << strategy;
      EXPECT_EQ(j.checkpoints.last(), older) << strategy;
      EXPECT_TRUE(at::equal(weights_of(j), saved[size_t(g.rank())])) << strategy << " rank " << g.rank();
    });
  }
}

}  // namespace
}  // namespace ddp::train::detail
