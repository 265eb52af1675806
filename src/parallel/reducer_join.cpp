// The reducer's part of Join: on a rank out of inputs, the collectives that
// the ranks still training issue in their forward and backward, on zeros.
#include <ATen/ATen.h>

#include "ddp/dist/device.h"
#include "dist/host_memory.h"
#include "parallel/reducer.h"

namespace ddp::detail {

// The rebuild is a broadcast of rank 0's order, due at the first synchronised
// forward after the first synchronised backward: this rank counts the
// shadowed backwards as its own (shadow_backward), so it is due here exactly
// when it is on the others, and every rank keeps the same buckets.
void Reducer::shadow_forward(bool rebuild) {
  const bool sync = sync_;
  sync_ = true;  // the ranks training decided (`rebuild`); not this rank's no_sync
  prepare_for_forward(rebuild);
  sync_ = sync;
}

// As PyTorch's _match_all_reduce_for_bwd_pass: one GradBucket of zeros per
// bucket, launched in bucket order through the registered hook (so that a
// hook's own collectives, PowerSGD's included, match), all waited for at the
// end. This rank's gradients are left alone.
void Reducer::shadow_backward() {
  if (world_of_one_) {
    if (!rebuilt_) rebuild_due_ = true;
    return;
  }
  check_layout_once("Join");  // done in shadow_forward, or here after an eval-mode forward, as the first hook does
  std::vector<Work> works;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GradBucket gb;
    gb.index = b;
    gb.num_buckets = buckets_.size();
    gb.buffer = at::zeros_like(buckets_[b].flat);
    int64_t offset = 0;
    for (size_t i : buckets_[b].params) {
      const int64_t n = params_[i].numel();
      gb.gradients.push_back(gb.buffer.narrow(0, offset, n).view(params_[i].sizes()));
      gb.parameters.push_back(params_[i]);
      offset += n;
    }
    if (hook_) {
      works.push_back(hook_->run(*group_, gb));
    } else {
      AllReduceOptions o;
      o.async_op = true;
      works.push_back(group_->all_reduce(gb.buffer, o));
    }
  }
  // finalize()'s unused-parameter counts: this rank used none.
  at::Tensor counts;
  Work counted;
  if (unused_allowed() && !(opts_.static_graph && !globally_used_.empty())) {
    counts = at::zeros({static_cast<int64_t>(params_.size())}, at::TensorOptions(group_->device()).dtype(at::kInt));
    AllReduceOptions o;
    o.async_op = true;
    counted = group_->all_reduce(counts, o);
  }
  wait_all(works);  // in bucket order, as finalize(): a hook's continuations launch more
  counted.wait();
  if (counts.defined()) {
    if (opts_.static_graph) {
      const at::Tensor used = host_copy(counts);
      const int* c = host_data<int>(used, "Join's unused-parameter counts");
      globally_used_.assign(params_.size(), 0);
      for (size_t i = 0; i < params_.size(); ++i) globally_used_[i] = c[i] > 0;
      if (!have_unused_known_) {  // a static graph: the same on every rank
        for (size_t i = 0; i < params_.size(); ++i) unused_known_[i] = !globally_used_[i];
        have_unused_known_ = true;
      }
    }
  }
  if (!rebuilt_) rebuild_due_ = true;
}

}  // namespace ddp::detail
