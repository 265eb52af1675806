// This rank's training losses and top-1 hits, summed where they are computed (on a GPU, on the GPU) and
// copied to the host in one read only when the loop needs them: at log points, before a checkpoint, at the
// epoch's end and for an error's message. A GPU's step path never waits for them (PyTorch's `.item()` per
// step would). The sums are float64 in the order the host summed them before: the same values to the bit.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "dist/host_memory.h"

namespace ddp::train::detail {

class RunningLoss {
 public:
  // `epoch_sum`: the epoch's losses before this loop (a resumed epoch's, from the checkpoint).
  RunningLoss(const at::Device& device, double epoch_sum) {
    const auto opts = at::TensorOptions().dtype(at::kDouble).device(device);
    sums_ = at::zeros({3}, opts);  // [this step's loss sum, hits since the last read, the epoch's loss sum]
    if (epoch_sum != 0) sums_[2].fill_(epoch_sum);
  }

  // A micro-batch's mean loss (one value) and, for a classification, its top-1 hits (undefined otherwise).
  void add_micro(const at::Tensor& loss, const at::Tensor& hits) {
    at::Tensor step = sums_[0];
    step.add_(loss.detach().reshape({}));
    if (hits.defined()) sums_[1].add_(hits);
  }

  // The step in progress's loss sum so far, on the device (a view: it changes as the loop goes on).
  at::Tensor step_sum() const { return sums_[0]; }

  // At a step's end: its loss sum into the epoch's, and a fresh step.
  void end_step() {
    sums_[2].add_(sums_[0]);
    sums_[0].zero_();
  }

  struct Read {
    double step = 0;   // the step in progress: its loss sum so far
    double hits = 0;   // top-1 hits since the last clear_hits (log point)
    double epoch = 0;  // the epoch's loss sum, the step in progress not yet in it
  };

  // One copy to the host; changes nothing (a checkpoint between log points reads too).
  Read read() const {
    at::Tensor host = sums_.to(at::kCPU);
    const double* p = ddp::detail::host_data<double>(host, "the running training loss");
    return {p[0], p[1], p[2]};
  }

  // At a log point, after its read: the hits count from zero again.
  void clear_hits() { sums_[1].zero_(); }

 private:
  at::Tensor sums_;
};

}  // namespace ddp::train::detail
