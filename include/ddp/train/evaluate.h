// Distributed evaluation that counts every sample exactly once: each rank
// evaluates its own exact shard (DistributedSampler with exact = true: no
// padding, uneven shards) and the sums of loss, top-1 and top-5 hits, the
// metrics' sums and the sample count are all-reduced.
//
//   auto shard = ddp::train::exact_shard(test_x.size(0), *group);  // this rank's indices
//   auto r = ddp::train::evaluate(forward, test_x.index_select(0, shard), test_y.index_select(0, shard), 500, *group);
//   // r.count == test_x.size(0) on every rank
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/data/batch_loader.h"

#include "ddp/dist/process_group.h"

namespace ddp::train {

// A batch's loss, averaged over its samples.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

// A metric that is a mean over samples: `sum` gives the batch's sum (a scalar), and the result is the
// sum over every rank's batches divided by the samples counted (exact, whatever the sharding).
struct Metric {
  std::string name;
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)> sum;
};

struct EvalOptions {
  LossFn loss;                  // empty: cross-entropy
  std::vector<Metric> metrics;  // in EvalResult::metrics, in this order
};

struct EvalResult {
  double loss = 0;  // mean loss (cross-entropy unless EvalOptions::loss)
  // Classification (outputs [B, C], integer targets [B]) only; has_accuracy false otherwise.
  double acc1 = 0;  // fraction of samples whose label is the top logit
  double acc5 = 0;  // fraction whose label is among the 5 top logits (all, with fewer than 5 classes)
  bool has_accuracy = true;
  int64_t count = 0;
  std::vector<std::pair<std::string, double>> metrics;  // EvalOptions::metrics' means
};

// Test-time augmentation: the logits averaged over views of each test image [B, C, H, W].
enum class Tta {
  kNone = 0,       // the image
  kFlip = 1,       // the image and its mirror
  kFlipShift = 2,  // kFlip's mean (weight 1/2), and kFlip of the image shifted by (-1,-1) and (+1,+1) (reflect-padded)
};
// `net`'s logits averaged over the views `tta` names (1, 2 or 6 calls of net).
at::Tensor tta_logits(const std::function<at::Tensor(const at::Tensor&)>& net, const at::Tensor& x, Tta tta);

// A model's logits for a batch, and an evaluation's use of it (Task::eval_forward): `last` is the evaluation
// after the final epoch.
using Forward = std::function<at::Tensor(const at::Tensor&)>;
using EvalForward = std::function<at::Tensor(const Forward& net, const at::Tensor& x, bool last)>;
// Test-time augmentation: the views `each` after every epoch, `final` (at least each's) after the last.
EvalForward with_tta(Tta each, Tta final);

// This rank's indices of an n-sample evaluation set (int64, in order).
at::Tensor exact_shard(int64_t n, const ProcessGroup& group);

// forward: logits [B, C] for a batch; run without gradients. x/y: this rank's samples.
EvalResult evaluate(const std::function<at::Tensor(const at::Tensor&)>& forward, const at::Tensor& x,
                    const at::Tensor& y, int64_t batch_size, ProcessGroup& group, const EvalOptions& options = {});
// The same over batches from `next` (nullopt ends them), e.g. a BatchLoader's over files.
EvalResult evaluate_batches(const std::function<at::Tensor(const at::Tensor&)>& forward,
                            const std::function<std::optional<data::Batch>()>& next, ProcessGroup& group,
                            const EvalOptions& options = {});

// Whether (output, target) is a classification batch: output [B, C], target [B] of an integer type.
bool is_classification(const at::Tensor& output, const at::Tensor& target);

}  // namespace ddp::train
