// The Trainer's parts on their own (src/train/fit_parts.h): the evaluator on three
// ranks, against the closed-form result over the whole test set.
#include <gtest/gtest.h>

#include <torch/nn/modules/linear.h>

#include "ddp/train/ema.h"
#include "support/rank_threads.h"
#include "train/fit_parts.h"

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
  j.task.test_x = x.slice(0, begin[g.rank()], begin[g.rank() + 1]);
  j.task.test_y = y.slice(0, begin[g.rank()], begin[g.rank() + 1]);
  j.task.model = torch::nn::AnyModule(linear(weight));
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
    auto shadow = linear(shadow_w);
    j.shadow = torch::nn::AnyModule(shadow);
    j.ema = std::make_unique<ModelEma>(j.shadow.ptr(), 0.5);
    r = evaluate_model(j);
    EXPECT_DOUBLE_EQ(r.acc1, shadow_acc1);
    EXPECT_NEAR(r.loss, shadow_loss, 1e-5 * std::abs(shadow_loss));
    EXPECT_NE(eval_text(r).find("acc1 " + percent(shadow_acc1)), std::string::npos) << eval_text(r);
  });
}

}  // namespace
}  // namespace ddp::train::detail
