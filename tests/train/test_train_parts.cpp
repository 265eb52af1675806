// Losses, schedules, EMA, exact distributed evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include "ddp/errors.h"
#include "ddp/parallel/clip_grad.h"
#include "ddp/train/config.h"
#include "ddp/train/ema.h"
#include "ddp/train/evaluate.h"
#include "ddp/train/losses.h"
#include "ddp/train/recipe.h"
#include "ddp/train/schedule.h"
#include "support/rank_threads.h"
#include "train/finite_check.h"
#include "train/inplace.h"
#include "train/recipes/common.h"
#include "train/stop_check.h"
#include "train/test_files.h"

namespace ddp::train {
namespace {

// --clip-grad's norm: the whole set's 2-norm, scaled only above max_norm; a non-finite norm scales nothing, so
// that the non-finite check that follows names the gradient at fault.
TEST(ClipGradNorm, ScalesToTheNormAndLeavesNonFiniteAlone) {
  at::Tensor a = at::tensor({3.0f}), b = at::tensor({0.0f, 4.0f});
  const at::Tensor norm = ddp::clip_grad_norm({a, b}, 10);
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_EQ(norm.scalar_type(), at::kFloat);
  EXPECT_DOUBLE_EQ(norm.item<double>(), 5);
  EXPECT_TRUE(at::equal(b, at::tensor({0.0f, 4.0f}))) << "scaled below max_norm";
  EXPECT_DOUBLE_EQ(ddp::clip_grad_norm({a, b}, 1).item<double>(), 5);
  // Scaled by 1 / (5 + 1e-6): float32's rounding of 0.6 and 0.8.
  EXPECT_NEAR(a.item<float>(), 0.6, 2e-7);
  EXPECT_NEAR(b[1].item<float>(), 0.8, 2e-7);
  at::Tensor bad = at::tensor({1.0f, NAN}), fine = at::tensor({100.0f});
  EXPECT_TRUE(std::isnan(ddp::clip_grad_norm({fine, bad}, 1).item<double>()));
  EXPECT_EQ(fine.item<float>(), 100.0f) << "scaled by a NaN norm";
  at::Tensor inf = at::tensor({INFINITY});
  EXPECT_TRUE(std::isinf(ddp::clip_grad_norm({fine, inf}, 1).item<double>()));
  EXPECT_EQ(fine.item<float>(), 100.0f) << "scaled by an infinite norm";
  // A float16 gradient whose norm float16 cannot hold (above 65504): its norm in float32, and clipped.
  at::Tensor h = at::full({4}, 60000.0, at::kHalf);
  EXPECT_EQ(ddp::clip_grad_norm({h}, 60000).item<double>(), 120000);
  EXPECT_TRUE(at::equal(h, at::full({4}, 30000.0, at::kHalf))) << h;  // scaled by 0.5 (float32's 60000 / 120000)
  EXPECT_EQ(ddp::clip_grad_norm({}, 1).item<double>(), 0);
}

TEST(LabelSmoothing, ClosedForm) {
  // Two classes with p = (1/4, 3/4), target 1: NLL = ln(4/3), mean -log p = (ln 4 + ln(4/3)) / 2.
  at::Tensor logits = at::tensor({0.0, std::log(3.0)}, at::kDouble).view({1, 2});
  at::Tensor target = at::tensor({int64_t{1}});
  const double nll = std::log(4.0 / 3.0), smooth = (std::log(4.0) + std::log(4.0 / 3.0)) / 2;
  // float64 on values below 1.5: a softmax of 2, logs, a mean: under 10 roundings of 2^-53 (1.1e-16) each.
  EXPECT_NEAR(label_smoothing_cross_entropy(logits, target, 0).item<double>(), nll, 1e-15);
  EXPECT_NEAR(label_smoothing_cross_entropy(logits, target, 0.2).item<double>(), 0.8 * nll + 0.2 * smooth, 1e-15);
}

TEST(LabelSmoothing, EqualsPyTorchCrossEntropyWithLabelSmoothing) {
  at::manual_seed(3);
  at::Tensor logits = at::randn({17, 10}, at::kDouble);
  at::Tensor target = at::randint(10, {17}, at::kLong);
  at::Tensor ours = label_smoothing_cross_entropy(logits, target, 0.2);
  at::Tensor theirs = at::cross_entropy_loss(logits, target, {}, at::Reduction::None, -100, 0.2);
  // Both in float64 (10 classes: ~30 roundings of 1.1e-16 on values below 10, so
  // under 1e-13); a float32 step anywhere would show at 1e-7.
  EXPECT_TRUE(at::allclose(ours, theirs, 1e-12, 1e-12)) << (ours - theirs).abs().max();
}

TEST(LabelSmoothing, BadArguments) {
  at::Tensor logits = at::zeros({3, 4});
  EXPECT_THROW(label_smoothing_cross_entropy(logits, at::zeros({2}, at::kLong), 0.1), std::invalid_argument);
  EXPECT_THROW(label_smoothing_cross_entropy(logits, at::zeros({3}, at::kLong), 1.5), std::invalid_argument);
}

TEST(Schedule, Shapes) {
  const int64_t T = 101;
  auto one = LrSchedule::parse("onecycle:0.25:0");
  EXPECT_DOUBLE_EQ(one(0, T), 0);
  EXPECT_DOUBLE_EQ(one(25, T), 1);
  EXPECT_DOUBLE_EQ(one(100, T), 0);
  EXPECT_DOUBLE_EQ(one(50, T), 2.0 / 3.0);
  // float64: a cos and three operations on values <= 1, a few 1.1e-16 each; 1e-15 bounds them.
  auto cos = LrSchedule::parse("cosine:0.1");
  EXPECT_DOUBLE_EQ(cos(0, T), 1);
  EXPECT_NEAR(cos(50, T), 0.55, 1e-15);
  EXPECT_NEAR(cos(100, T), 0.1, 1e-15);
  auto step = LrSchedule::parse("step:30:0.5");
  EXPECT_DOUBLE_EQ(step(29, T), 1);
  EXPECT_DOUBLE_EQ(step(30, T), 0.5);
  EXPECT_DOUBLE_EQ(step(95, T), 0.125);
  auto bag = LrSchedule::parse("piecewise:0:0,0.25:1,1:0.1");
  EXPECT_DOUBLE_EQ(bag(25, T), 1);
  EXPECT_NEAR(bag(100, T), 0.1, 1e-15);
  auto warm = LrSchedule::constant().with_warmup(4);
  EXPECT_DOUBLE_EQ(warm(0, T), 0.25);
  EXPECT_DOUBLE_EQ(warm(3, T), 1);
  EXPECT_DOUBLE_EQ(warm(50, T), 1);
  // After the ramp, the schedule runs over the steps left: nanoGPT's cosine of 2000 steps with 100 of warm-up
  // is 1 at step 100, 0.1 + 0.9 (1 + cos(pi / 3)) / 2 = 0.775 a third of the way (633 of the 1899 steps to the
  // last) and 0.1 at the last step.
  auto nano = LrSchedule::parse("cosine:0.1").with_warmup(100);
  EXPECT_DOUBLE_EQ(nano(49, 2000), 0.5);
  EXPECT_DOUBLE_EQ(nano(100, 2000), 1);
  EXPECT_NEAR(nano(733, 2000), 0.775, 1e-15);
  EXPECT_NEAR(nano(1999, 2000), 0.1, 1e-15);
}

TEST(Schedule, BadSpecsNameTheSpecAndTheValidForms) {
  for (std::string bad : {"", "linear", "step:10", "cosine:x", "piecewise:0.5:1,0.2:0", "onecycle:1.5", "cosine:inf",
                          "step:30:nan", "piecewise:0:1,1:inf"})
    EXPECT_THROW(LrSchedule::parse(bad), std::invalid_argument) << "accepted '" << bad << "'";
  try {
    LrSchedule::parse("linear");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'linear'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("onecycle"), std::string::npos) << e.what();
  }
}

TEST(ModelEma, AveragesFloatsAndCopiesIntegers) {
  torch::nn::Linear a(3, 2), b(3, 2);
  ModelEma ema(b.ptr(), 0.75);
  ema.copy_from(*a);
  EXPECT_TRUE(at::equal(b->weight, a->weight));
  at::Tensor w0 = a->weight.detach().clone();
  {
    at::NoGradGuard g;
    a->weight.add_(4.0);
  }
  ema.update(*a);
  // float32, weights below 5: ema and the expected value each take 2-3 roundings of at
  // most half an ulp of 5 (2.4e-7): their difference stays under 1e-6.
  EXPECT_TRUE(at::allclose(b->weight, w0 * 0.75 + (w0 + 4.0) * 0.25, 0, 1e-6));
  torch::nn::Linear c(4, 2);
  EXPECT_THROW(ema.update(*c), std::invalid_argument);
}

// Test-time views: a "network" reading two pixels, f(v) = v[0][0] + 100 v[1][2], shows which views were averaged
// and with what weights.
TEST(Tta, ViewsAndWeights) {
  at::Tensor x = at::arange(9, at::kFloat).view({1, 1, 3, 3});  // [[0 1 2] [3 4 5] [6 7 8]]
  int calls = 0;
  auto net = [&](const at::Tensor& v) {
    ++calls;
    return (v.select(2, 0).select(2, 0) + 100 * v.select(2, 1).select(2, 2)).contiguous();  // [1, 1]
  };
  EXPECT_EQ(tta_logits(net, x, Tta::kNone).item<float>(), 500.0f);
  // Mirrored: [[2 1 0] [5 4 3] [8 7 6]] -> 302.
  EXPECT_EQ(tta_logits(net, x, Tta::kFlip).item<float>(), (500.0f + 302.0f) / 2);
  calls = 0;
  // Reflect-padded by 1, x's rows become [4 3 4 5 4], [1 0 1 2 1], [4 3 4 5 4], [7 6 7 8 7], [4 3 4 5 4]. The
  // (-1,-1) view is the top-left 3x3, [[4 3 4] [1 0 1] [4 3 4]] -> 104 (mirrored the same); the (+1,+1) view the
  // bottom-right one, [[4 5 4] [7 8 7] [4 5 4]] -> 704 (mirrored the same). Weights: 1/2 on the plain pair's
  // mean, 1/4 on each shifted pair's.
  EXPECT_FLOAT_EQ(tta_logits(net, x, Tta::kFlipShift).item<float>(), 0.5f * 401 + 0.25f * 104 + 0.25f * 704);
  EXPECT_EQ(calls, 6);
}

// Lookahead's pieces: an update with its own rho, then the model takes the average.
TEST(ModelEma, UpdateWithRhoAndCopyTo) {
  torch::nn::Linear a(3, 2), b(3, 2);
  ModelEma ema(b.ptr(), 0.75);
  ema.copy_from(*a);
  at::Tensor w0 = a->weight.detach().clone();
  {
    at::NoGradGuard g;
    a->weight.add_(2.0);
  }
  ema.update(*a, 0.5);  // not the constructor's 0.75
  // As above: a few roundings of at most half an ulp of 3 stay under 1e-6.
  EXPECT_TRUE(at::allclose(b->weight, w0 + 1.0, 0, 1e-6));
  ema.copy_to(*a);
  EXPECT_TRUE(at::equal(a->weight, b->weight));
  EXPECT_TRUE(a->weight.requires_grad());
  EXPECT_THROW(ema.update(*a, 1.5), std::invalid_argument);
  // A model of another architecture: the message names which side has what.
  torch::nn::Linear other(3, 4);
  try {
    ema.copy_to(*other);
    ADD_FAILURE() << "copy_to a model of another shape";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("is weight in the model but weight in the averaged model (or shapes differ)"),
              std::string::npos)
        << e.what();
  }
}

// 10 samples over 3 ranks: every sample counted once, results equal one process's.
TEST(Evaluate, ExactCountsAcrossThreeRanks) {
  at::manual_seed(0);
  at::Tensor x = at::randn({10, 7});
  at::Tensor y = at::tensor({0, 1, 2, 3, 4, 5, 6, 0, 1, 2}, at::kLong);
  auto forward = [](const at::Tensor& in) { return in; };  // logits = inputs: 7 classes
  // The reference in float64; ours computes each sample's loss in float32 (a
  // log-softmax of 7: ~10 roundings of 2^-24 on values below the largest loss).
  at::Tensor losses64 = at::cross_entropy_loss(x.to(at::kDouble), y, {}, at::Reduction::None);
  at::Tensor loss = losses64.mean();
  const double loss_tol = 10 * std::ldexp(1.0, -24) * losses64.abs().max().item<double>();
  at::Tensor top1 = x.argmax(1).eq(y).to(at::kDouble).mean();
  at::Tensor top5 = std::get<1>(x.topk(5, 1)).eq(y.unsqueeze(1)).any(1).to(at::kDouble).mean();
  for (int world : {1, 3}) {
    ddp::testing::run_ranks(is_backend_available("gloo") ? "gloo" : "local", world, [&](ProcessGroup& g) {
      at::Tensor shard = exact_shard(10, g);
      EXPECT_EQ(shard.numel(), g.rank() == 0 ? (world == 3 ? 4 : 10) : 3);
      EvalResult r = evaluate(forward, x.index_select(0, shard), y.index_select(0, shard), 2, g);
      EXPECT_EQ(r.count, 10);
      EXPECT_NEAR(r.loss, loss.item<double>(), loss_tol);
      EXPECT_DOUBLE_EQ(r.acc1, top1.item<double>());
      EXPECT_DOUBLE_EQ(r.acc5, top5.item<double>());
    });
  }
}

// ddp-train's preemption check: the ranks agree on when to check (the slowest rank's pace) and all stop at
// the first check after any rank's signal.
TEST(StopSchedule, EveryRankStopsAtTheSameCheckStep) {
  constexpr int64_t kSignalAt = 37, kMaxInterval = 8;
  for (int world : {1, 2, 3}) {
    std::vector<int64_t> stopped(world, -1);
    std::vector<std::vector<int64_t>> intervals(world), due(world);
    ddp::testing::run_ranks(is_backend_available("gloo") ? "gloo" : "local", world, [&](ProcessGroup& g) {
      detail::StopSchedule stop(g, /*target_s=*/0.5, kMaxInterval);
      for (int64_t step = 0; step < 200; ++step) {
        if (stop.due(step)) due[g.rank()].push_back(step);  // what a rank reads the store for only then
        stop.begin(step, g.rank() == g.size() - 1 && step >= kSignalAt ? 15 : 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(1 + g.rank()));  // ranks of different speeds
        if (stop.requested()) {
          stopped[g.rank()] = step;
          break;
        }
        intervals[g.rank()].push_back(stop.interval());
      }
    });
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(stopped[r], stopped[0]) << "world " << world << " rank " << r;
      EXPECT_EQ(intervals[r], intervals[0]) << "world " << world << " rank " << r;
    }
    EXPECT_GE(stopped[0], kSignalAt) << "world " << world;
    EXPECT_LT(stopped[0], kSignalAt + kMaxInterval) << "world " << world;
    // The first check has no pace to go by (the next step checks again); steps of a few ms against a 0.5 s
    // target: from the second check on, the interval is the maximum.
    // The check steps due() names: 0, 1, then every kMaxInterval steps, the stop step among them.
    std::vector<int64_t> expected{0};
    for (int64_t step = 1; step <= stopped[0]; step += kMaxInterval) expected.push_back(step);
    EXPECT_EQ(due[0], expected) << "world " << world;
    ASSERT_GE(intervals[0].size(), 2u);
    EXPECT_EQ(intervals[0][0], 1) << "world " << world;
    EXPECT_EQ(intervals[0][1], kMaxInterval) << "world " << world;
  }
}

// A failed background checkpoint write on rank 0 travels with the stop check: every rank learns it at the same
// check step (the first at or after the failure), without a stop being asked.
TEST(StopSchedule, RankZerosFailedSaveReachesEveryRankAtTheSameStep) {
  constexpr int64_t kFailAt = 21, kMaxInterval = 4;
  for (int world : {1, 2, 4}) {
    std::vector<int64_t> seen(world, -1);
    ddp::testing::run_ranks(is_backend_available("gloo") ? "gloo" : "local", world, [&](ProcessGroup& g) {
      detail::StopSchedule stop(g, /*target_s=*/0.5, kMaxInterval);
      for (int64_t step = 0; step < 100; ++step) {
        stop.begin(step, 0, g.rank() == 0 && step >= kFailAt);
        EXPECT_FALSE(stop.requested());
        if (stop.save_failed()) {
          seen[g.rank()] = step;
          break;
        }
      }
    });
    for (int r = 1; r < world; ++r) EXPECT_EQ(seen[r], seen[0]) << "world " << world << " rank " << r;
    EXPECT_GE(seen[0], kFailAt) << "world " << world;
    EXPECT_LT(seen[0], kFailAt + kMaxInterval) << "world " << world;
  }
}

// In-place recovery's committed buffers: a failed step's forward moved BatchNorm's running statistics and batch
// count on; put_back() restores those of the last completed step exactly, also after steps that changed them.
TEST(CommittedBuffers, PutBackGivesTheLastCompletedStepsBuffers) {
  torch::nn::BatchNorm1d bn(4);
  bn->train();
  detail::CommittedBuffers committed;
  auto snapshot = [&] {
    std::vector<at::Tensor> v;
    for (const auto& b : bn->buffers()) v.push_back(b.clone());
    return v;
  };
  for (int step = 0; step < 3; ++step) {
    bn->forward(at::randn({8, 4}));  // a completed step
    committed.take(*bn);
  }
  const auto at_commit = snapshot();
  bn->forward(at::randn({8, 4}) * 3 + 1);  // the failed step's forward
  ASSERT_FALSE(at::equal(bn->buffers()[0], at_commit[0]));
  committed.put_back(*bn);
  const auto restored = snapshot();
  ASSERT_EQ(restored.size(), at_commit.size());
  for (size_t i = 0; i < restored.size(); ++i) EXPECT_TRUE(at::equal(restored[i], at_commit[i])) << "buffer " << i;
  EXPECT_EQ(restored.back().item<int64_t>(), 3);  // num_batches_tracked: the 3 completed steps
}

// --nan-check's test of the reduced gradients: exact, also where a fast float32 sum overflows.
TEST(FiniteCheck, GradientsNonFiniteOnlyWhenAnElementIs) {
  torch::nn::Linear model(1000, 10);
  auto set = [&](float value, int64_t at) {
    for (auto& p : model->parameters()) p.mutable_grad() = at::full_like(p, 0.5);
    if (at >= 0) model->weight.mutable_grad().view({-1})[at] = value;
  };
  set(0, -1);
  EXPECT_TRUE(detail::gradients_finite(*model));
  set(NAN, 1234);
  EXPECT_FALSE(detail::gradients_finite(*model));
  set(INFINITY, 9999);
  EXPECT_FALSE(detail::gradients_finite(*model));
  for (auto& p : model->parameters()) p.mutable_grad() = at::full_like(p, 1e36f);  // finite; the sum overflows
  EXPECT_TRUE(std::isinf(model->weight.grad().sum().item<float>()));
  EXPECT_TRUE(detail::gradients_finite(*model));
  model->bias.mutable_grad()[3] = -INFINITY;
  EXPECT_FALSE(detail::gradients_finite(*model));
  EXPECT_EQ(detail::first_non_finite(*model, /*gradients=*/true), std::optional<std::string>("bias (inf)"));
}

TEST(Limit, EvenlySpacedKeepsEveryClassOfASortedFolder) {
  EXPECT_EQ(detail::evenly_spaced(4, 10), (std::vector<int64_t>{0, 2, 5, 7}));
  EXPECT_EQ(detail::evenly_spaced(0, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(detail::evenly_spaced(5, 3), (std::vector<int64_t>{0, 1, 2}));
  // 10 classes of 24 files in class order (an ImageFolder): 40 picked are 4 of each class.
  std::vector<int> per_class(10, 0);
  for (int64_t i : detail::evenly_spaced(40, 240)) per_class[size_t(i / 24)] += 1;
  EXPECT_EQ(per_class, std::vector<int>(10, 4));
}

}  // namespace
}  // namespace ddp::train
