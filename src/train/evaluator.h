// The Trainer's evaluation part (evaluator.cpp): this rank's share of the Task's evaluation data, and how a
// batch of it is evaluated (Task::prepare_input, Task::eval_forward under the run's precision).
#pragma once
#include <torch/nn/modules/container/any.h>

#include <functional>

#include "ddp/dist/process_group.h"
#include "ddp/train/config.h"
#include "ddp/train/evaluate.h"
#include "ddp/train/precision.h"
#include "ddp/train/task.h"

namespace ddp::train::detail {

class Evaluator {
 public:
  Evaluator() = default;
  // The Task's test data (check_data), narrowed to this rank's exact share unless it is a share already.
  Evaluator(const Task& task, const TrainConfig& cfg, const ProcessGroup& group);
  // `net` on this rank's share, reduced over the ranks; `last`: the evaluation after the final epoch.
  EvalResult run(torch::nn::AnyModule& net, const at::Device& device, Precision precision, ProcessGroup& group,
                 bool last) const;
  int64_t total() const { return total_; }  // samples over all ranks

 private:
  DataSource mine_;  // this rank's share
  int64_t total_ = 0;
  EvalOptions options_;
  EvalForward forward_;
  std::function<at::Tensor(const at::Tensor&)> prepare_;
  int64_t batch_ = 0;
  int workers_ = 0;
};

}  // namespace ddp::train::detail
