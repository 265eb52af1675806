// The reducer behind DistributedDataParallel. Autograd hooks call on_gradient_accumulated() as
// each gradient is accumulated; a bucket whose gradients are all in is
// reduced at once (asynchronously, in bucket order on every rank); finalize(),
// queued on the autograd engine, waits for the reductions at the end of
// backward and writes the averaged gradients back.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/torch_compat.h"
#include "dist/device_mark.h"
#include "parallel/comm_timings.h"
#include "parallel/gradient_hooks.h"

namespace torch::autograd {
struct Node;
}

namespace ddp::detail {

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_cap_bytes = 1u << 20;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool static_graph = false;
};

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, GroupPtr group, ReducerOptions opts);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a forward pass: rebuilds buckets once, in the order gradients
  // arrived on rank 0 during the first synchronised backward (collective:
  // only in a forward with grad enabled, outside no_sync).
  void prepare_for_forward(bool grad_enabled);
  // After a forward pass (find_unused_parameters): parameters the outputs do
  // not depend on are marked ready as soon as backward starts.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);

  void set_sync(bool enabled) { sync_ = enabled; }
  bool sync() const { return sync_; }
  void set_comm_hook(std::shared_ptr<CommHook> hook);
  // What the built-in path divides gradients by in the next backward (default:
  // the world size): Join's ranks still training. Asked by settle_divisor() at the
  // end of the forward, where it may wait (Join's all_reduce), not in a hook.
  void set_divisor_source(std::function<double()> source) { divisor_source_ = std::move(source); }
  void settle_divisor();
  // Join (reducer_join.cpp), on a rank out of inputs while others train: the
  // collectives of their forward (bucket rebuild, if due and `rebuild`) and of
  // their backward (each bucket's reduction on zeros, through the hook if
  // any, then the unused-parameter counts), in the same order.
  void shadow_forward(bool rebuild);
  void shadow_backward();
  // Parameter indices per bucket.
  const std::vector<std::vector<size_t>>& buckets() const { return bucket_params_; }
  // The parameter order of the rebuild after the first synchronised backward: the one built, or after that
  // backward the one the next forward will build (this rank's arrival order; rank 0's is used); empty before.
  std::vector<size_t> bucket_order() const;
  // Builds the buckets in `order` (a permutation of the parameter indices, else InvalidArgument) and skips the
  // rebuild: a resumed run reduces in the buckets of the run it continues. Every rank alike, outside a backward.
  void restore_order(const std::vector<int64_t>& order);
  // Settles the timings of every backward so far first (on a GPU: waits for their events).
  const DDPStats& stats() const;

 private:
  struct Bucket {
    at::Tensor flat;
    std::vector<size_t> params;
    std::vector<at::Tensor> views;  // per parameter, shaped like it
    size_t pending = 0;
    Work work;                 // the bucket's reduction; value(): the reduced buffer
    int64_t launched_us = -1;  // timeline (when on): launch time, until its event is recorded
  };

  void build(const std::vector<size_t>& order);
  std::vector<size_t> arrival_order() const;
  void on_gradient_accumulated(size_t index);  // the autograd hook of parameter `index`
  void mark_ready(size_t index, bool used);
  void launch_ready_buckets();
  void record_completed_buckets();  // timeline events of the finished reductions
  // Before the first reduction after build(): ranks compare bucket layouts. `where`: the error's op.
  void check_layout_once(const char* where);
  void finalize();
  void reset_iteration();
  double divisor();
  [[noreturn]] void fail_unfinished();
  [[noreturn]] void fail_gradient_twice(size_t index);
  // Parameters may get no gradient: find_unused_parameters, or static_graph
  // (which learns the unused ones in its first iteration).
  bool unused_allowed() const { return opts_.find_unused_parameters || opts_.static_graph; }

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  GroupPtr group_;
  ReducerOptions opts_;
  // The registered comm hook; none: the built-in path, where gradients are divided
  // by the world size as they are copied into their bucket (one pass less over
  // memory), then each bucket is all-reduced (SUM).
  std::shared_ptr<CommHook> hook_;
  std::function<double()> divisor_source_;
  double divisor_ = 0;                    // 0: not asked yet in this backward
  bool world_of_one_;                     // nothing to reduce: a world of one, no hook registered
  std::unique_ptr<GradientHooks> hooks_;  // made at the end of the constructor

  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> bucket_slot_;  // parameter -> (bucket, slot in it)
  size_t next_launch_ = 0;

  bool sync_ = true;
  bool in_backward_ = false;
  std::vector<char> ready_;
  std::vector<char> used_;          // got a gradient in this backward
  std::vector<char> unused_known_;  // known unused before backward (graph walk or static graph)
  bool have_unused_known_ = false;
  std::vector<char> globally_used_;  // static_graph: used on some rank, learned in the first iteration
  bool forward_seen_ = false;        // DDP's forward ran at least once
  bool expect_gradients_ = false;    // a forward ran since the last reduction
  std::vector<size_t> arrival_;      // order of the first synchronised backward
  bool rebuilt_ = false, rebuild_due_ = false;
  std::vector<size_t> rebuilt_order_;  // what the rebuild (or restore_order) built
  bool layout_checked_ = false;        // ranks compared their buckets (bucket_agreement.h) since build()

  // Timings: marks on the parameters' device, at the first and the last bucket's launch (comm_timings.h).
  at::Device device_{at::kCPU};
  DeviceMark first_launch_, last_launch_;
  CommTimings timings_;
};

}  // namespace ddp::detail
