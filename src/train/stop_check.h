// Whether any rank asked to stop (SIGTERM: preemption), learned without a
// blocking collective: a one-integer MAX all_reduce started before a step runs
// while the step computes, and is read after it (ddp-bench ddp --pair --guards
// measures what it costs).
#pragma once

#include <ATen/ATen.h>

#include "ddp/dist/collectives.h"
#include "ddp/dist/process_group.h"

namespace ddp::train::detail {

class StopCheck {
 public:
  // `local_signal`: this rank's request (the signal number, 0 for none).
  StopCheck(ProcessGroup& group, int local_signal) : flag_(at::tensor({local_signal}, at::kInt)) {
    AllReduceOptions o = op(ReduceOp::MAX);
    o.async_op = true;
    work_ = group.all_reduce(flag_, o);
  }
  // Waits for the all_reduce: true when some rank asked to stop.
  bool requested() {
    work_.wait();
    return flag_.item<int>() != 0;
  }

 private:
  at::Tensor flag_;
  Work work_;
};

}  // namespace ddp::train::detail
