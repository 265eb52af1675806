#include "parallel/reducer.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_set>

#include "ddp/dist/device.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/timeline.h"
#include "dist/error_context.h"
#include "dist/hook_waits.h"
#include "dist/host_memory.h"
#include "parallel/bucket_agreement.h"
#include "parallel/bucketing.h"

namespace ddp::detail {
namespace {

// The built-in reduction: one all_reduce (SUM) of a bucket whose gradients were
// divided by the world size while it was filled. Asynchronous, the last bucket
// too: it is launched from a gradient hook, where nothing may wait (hook_waits.h).
Work all_reduce_bucket(ProcessGroup& group, GradBucket& bucket) {
  at::Tensor buffer = bucket.buffer;
  AllReduceOptions o;
  o.async_op = true;
  return group.all_reduce(buffer, o);
}

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, GroupPtr group, ReducerOptions opts)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      opts_(opts),
      world_of_one_(group_->size() == 1) {
  if (!params_.empty()) device_ = params_[0].device();
  const size_t n = params_.size();
  ready_.assign(n, 0);
  used_.assign(n, 0);
  unused_known_.assign(n, 0);
  // Gradients usually arrive in reverse registration order.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  build(order);
  // One post hook per parameter's gradient accumulator: it runs after the
  // new gradient has been added to param.grad().
  hooks_ = std::make_unique<GradientHooks>(
      GradientHooks::accumulators_of(params_),
      ErrorContext{group_->backend(), group_->rank(), group_->size(), "DistributedDataParallel's gradient hook"}
          .prefix(),
      [this](size_t i) { on_gradient_accumulated(i); });
}

Reducer::~Reducer() = default;

void Reducer::set_comm_hook(std::shared_ptr<CommHook> hook) {
  if (!hook) throw InvalidArgument("DistributedDataParallel: register_comm_hook got a null hook");
  hook_ = std::move(hook);
  // As PyTorch: a registered hook runs in a world of one too (PowerSGD and the
  // 16-bit hooks change the gradients even there).
  if (!world_of_one_) return;
  world_of_one_ = false;
  std::vector<size_t> order;  // the buckets as they are, now with buffers
  for (const auto& bucket : bucket_params_) order.insert(order.end(), bucket.begin(), bucket.end());
  build(order);
}

// Buckets hold a flat buffer each; every parameter has a view into one. A world of one without a hook reduces
// nothing: its buckets keep their parameters only (no buffer, a model's worth of memory saved).
void Reducer::build(const std::vector<size_t>& order) {
  bucket_params_ = assign_buckets(params_, order, opts_.first_bucket_cap_bytes, opts_.bucket_cap_bytes);
  buckets_.clear();
  layout_checked_ = false;
  bucket_slot_.assign(params_.size(), {0, 0});
  for (size_t b = 0; b < bucket_params_.size(); ++b) {
    Bucket bucket;
    bucket.params = bucket_params_[b];
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) bucket_slot_[bucket.params[slot]] = {b, slot};
    bucket.pending = bucket.params.size();
    if (world_of_one_) {
      buckets_.push_back(std::move(bucket));
      continue;
    }
    int64_t total = 0;
    for (size_t i : bucket.params) total += params_[i].numel();
    bucket.flat = at::zeros({total}, params_[bucket.params[0]].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const at::Tensor& p = params_[bucket.params[slot]];
      // Aliases the bucket's memory without being an autograd view: LibTorch's
      // Optimizer::zero_grad() calls detach_() on gradients, which views refuse.
      at::Tensor alias = at::empty({0}, bucket.flat.options());
      alias.set_(bucket.flat.storage(), bucket.flat.storage_offset() + offset, p.sizes());
      bucket.views.push_back(alias);
      offset += p.numel();
    }
    buckets_.push_back(std::move(bucket));
  }
  if (opts_.gradient_as_bucket_view && !world_of_one_) {
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& view = buckets_[bucket_slot_[i].first].views[bucket_slot_[i].second];
      at::Tensor& grad = params_[i].mutable_grad();
      if (grad.defined()) {
        view.copy_(grad);
        grad = view;
      }
    }
  }
}

void Reducer::prepare_for_forward(bool grad_enabled) {
  if (in_backward_) reset_iteration();  // a backward that threw half way
  divisor_ = 0;                         // a forward that had no backward leaves no divisor behind
  divisor_source_ = nullptr;
  // Only a forward whose backward will synchronise rebuilds: the rebuild is
  // collective, and an evaluation forward may run on some ranks only.
  if (rebuild_due_ && !rebuilt_ && grad_enabled && sync_) {
    std::vector<size_t> order = arrival_order();
    // Ranks may have seen different orders (unused parameters differ per
    // rank); every rank must build the same buckets, so rank 0's order wins.
    if (!world_of_one_) {
      at::Tensor shared = at::empty({static_cast<int64_t>(order.size())}, at::kLong);
      int64_t* o = host_data<int64_t>(shared, "DistributedDataParallel's bucket order");
      for (size_t k = 0; k < order.size(); ++k) o[k] = static_cast<int64_t>(order[k]);
      group_->broadcast(shared);
      for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<size_t>(o[k]);
    }
    build(order);
    rebuilt_ = true;
    rebuild_due_ = false;
    rebuilt_order_ = std::move(order);
  }
  // Ranks compare bucket layouts here, outside backward's hooks, before the first reduction of these buckets.
  if (grad_enabled && sync_ && !world_of_one_) check_layout_once("DistributedDataParallel forward");
}

// The arrival order of the first synchronised backward, then the parameters that got no gradient (reverse).
std::vector<size_t> Reducer::arrival_order() const {
  std::vector<size_t> order = arrival_;
  for (size_t k = params_.size(); k-- > 0;)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  return order;
}

std::vector<size_t> Reducer::bucket_order() const {
  if (rebuilt_) return rebuilt_order_;
  if (rebuild_due_) return arrival_order();  // rank 0's is what the next forward's rebuild will broadcast
  return {};
}

void Reducer::restore_order(const std::vector<int64_t>& order) {
  const auto refuse = [&](const std::string& what) {
    return InvalidArgument("DistributedDataParallel: a bucket order must list each of the model's " +
                           std::to_string(params_.size()) + " parameters once: " + what);
  };
  std::vector<char> seen(params_.size(), 0);
  for (int64_t k : order) {
    if (k < 0 || k >= static_cast<int64_t>(params_.size()))
      throw refuse("index " + std::to_string(k) + " is out of range");
    if (seen[k]++) throw refuse("index " + std::to_string(k) + " is repeated");
  }
  if (order.size() != params_.size()) throw refuse("got " + std::to_string(order.size()) + " indices");
  if (in_backward_) throw InvalidArgument("DistributedDataParallel: the bucket order cannot change during a backward");
  rebuilt_order_.assign(order.begin(), order.end());
  build(rebuilt_order_);
  rebuilt_ = true;
  rebuild_due_ = false;
  arrival_.clear();
}

// Walks the autograd graph from the outputs; parameters whose accumulators
// are not reached cannot get a gradient in this backward.
void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  forward_seen_ = true;
  expect_gradients_ = true;
  if (!opts_.find_unused_parameters || !sync_ || outputs.empty()) return;
  if (opts_.static_graph && have_unused_known_) return;
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& t : outputs)
    if (t.defined() && t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges())
      if (edge.function) stack.push_back(edge.function.get());
  }
  for (size_t i = 0; i < params_.size(); ++i) unused_known_[i] = !seen.count(hooks_->accumulator(i));
  have_unused_known_ = true;
}

void Reducer::on_gradient_accumulated(size_t index) {
  if (!sync_) return;
  // After DDP reduced this forward's gradients, another gradient: a nested
  // (reentrant) backward such as activation checkpointing, or a second
  // backward() of one forward. Reducing it again would give wrong gradients.
  if (!in_backward_ && forward_seen_ && !expect_gradients_) fail_gradient_twice(index);
  if (!in_backward_) {
    // First gradient of this backward: reduce at its end, and let known
    // unused parameters contribute zeros right away.
    in_backward_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize(); });
    if (unused_allowed() && have_unused_known_)
      for (size_t i = 0; i < params_.size(); ++i)
        if (unused_known_[i] && !ready_[i] && i != index) mark_ready(i, false);
  }
  // A parameter used twice in one graph gets one accumulated gradient: a second
  // one means a reentrant backward, or a static graph that changed.
  if (ready_[index]) fail_gradient_twice(index);
  mark_ready(index, true);
}

void Reducer::fail_gradient_twice(size_t index) {
  const bool was_unused = ready_[index] && !used_[index];
  reset_iteration();
  expect_gradients_ = true;  // the next forward starts afresh
  ErrorContext ctx{group_->backend(), group_->rank(), group_->size(), "DistributedDataParallel backward"};
  if (was_unused)
    throw Error(ctx.prefix() + "parameter '" + names_[index] +
                "' got a gradient although static_graph learned in the first iteration that it is unused; with "
                "static_graph the set of used parameters must stay the same");
  throw Error(ctx.prefix() + "parameter '" + names_[index] +
              "' got a second gradient after DDP had reduced it in this backward pass. A nested (reentrant) "
              "backward, as activation checkpointing runs, or a second backward() of one forward would leave "
              "wrong gradients; DDP reduces each parameter's gradient once per forward. Recompute without a "
              "nested backward, or accumulate under no_sync() and reduce in the last backward.");
}

void Reducer::mark_ready(size_t index, bool used) {
  ready_[index] = 1;
  used_[index] = used;
  if (used && !rebuilt_ && !rebuild_due_) arrival_.push_back(index);
  auto [b, slot] = bucket_slot_[index];
  Bucket& bucket = buckets_[b];
  if (world_of_one_) {  // a world of one: gradients are already the average
    if (--bucket.pending == 0) launch_ready_buckets();
    return;
  }
  at::Tensor& view = bucket.views[slot];
  const at::Tensor& grad = params_[index].grad();
  if (used && grad.defined()) {
    if (grad.data_ptr() != view.data_ptr()) {
      if (!hook_)
        at::div_out(view, grad, divisor());  // while grad is hot in cache
      else
        view.copy_(grad);
      if (opts_.gradient_as_bucket_view) params_[index].mutable_grad() = view;
    } else if (!hook_) {
      view.div_(divisor());
    }
  } else {
    view.zero_();
  }
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::check_layout_once(const char* where) {
  if (layout_checked_) return;
  std::vector<at::Tensor> flats;
  for (const Bucket& b : buckets_) flats.push_back(b.flat);
  check_bucket_agreement(*group_, flats, where);
  layout_checked_ = true;
}

// Buckets are launched strictly in index order, so every rank issues the same
// sequence of collectives whatever the order its gradients arrived in.
void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    const bool first = next_launch_ == 0, last = next_launch_ + 1 == buckets_.size();
    const DeviceMark now = first || last ? DeviceMark::now(device_) : DeviceMark();
    if (first) first_launch_ = now;
    // The last bucket is launched once every gradient is in: backward's computation ends here.
    if (last) last_launch_ = now;
    Bucket& bucket = buckets_[next_launch_];
    if (world_of_one_) {
      ++next_launch_;
      continue;
    }
    // Done in the forward (prepare_for_forward), unless this backward came without a synchronising training
    // forward: one in eval mode (training with frozen statistics), whose forward may run on some ranks only, as an
    // evaluation may. Then here, once per build of the buckets: a wait in the hook by design.
    if (!layout_checked_) {
      AllowHookWait exempt;
      check_layout_once("DistributedDataParallel backward");
    }
    GradBucket gb;
    gb.index = next_launch_;
    gb.num_buckets = buckets_.size();
    gb.buffer = bucket.flat;
    gb.gradients = bucket.views;
    for (size_t i : bucket.params) gb.parameters.push_back(params_[i]);
    if (timeline::enabled()) bucket.launched_us = timeline::now_us();
    bucket.work = hook_ ? hook_->run(*group_, gb) : all_reduce_bucket(*group_, gb);
    ++next_launch_;
    if (timeline::enabled()) record_completed_buckets();
  }
}

// Timeline: each launched bucket's reduction, from its launch to the first time
// it is seen complete (polled at each launch, and at the end of backward as it waits).
void Reducer::record_completed_buckets() {
  for (size_t i = 0; i < next_launch_ && i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (b.launched_us < 0 || !b.work.is_completed()) continue;
    timeline::complete("bucket " + std::to_string(i), "reduce bucket " + std::to_string(i), b.launched_us,
                       timeline::now_us() - b.launched_us,
                       "\"bytes\":" + std::to_string(b.flat.nbytes()) + ",\"hook\":\"" +
                           (hook_ ? hook_->name() : std::string("allreduce")) + "\",\"bucket\":" + std::to_string(i));
    b.launched_us = -1;
  }
}

void Reducer::fail_unfinished() {
  std::string missing;
  int count = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (count++ < 5) missing += (missing.empty() ? "'" : ", '") + names_[i] + "'";
  }
  reset_iteration();
  ErrorContext ctx{group_->backend(), group_->rank(), group_->size(), "DistributedDataParallel backward"};
  throw Error(ctx.prefix() + std::to_string(count) + " parameter(s) got no gradient in this backward pass: " + missing +
              (count > 5 ? ", ..." : "") +
              ". Their buckets cannot be reduced. If the model does not use every parameter in every "
              "forward pass, construct DDP with find_unused_parameters = true.");
}

// Runs at the end of backward (queued on the autograd engine).
void Reducer::finalize() {
  const DeviceMark backward_end =
      next_launch_ == buckets_.size() && last_launch_.valid() ? last_launch_ : DeviceMark::now(device_);
  std::vector<char> globally_used(params_.size(), 1);
  Work used_work;
  at::Tensor used_counts;
  if (unused_allowed()) {
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) mark_ready(i, false);
    if (opts_.static_graph && !globally_used_.empty()) {
      globally_used = globally_used_;  // learned in the first iteration: no collective
    } else {
      if (opts_.static_graph) {
        for (size_t i = 0; i < params_.size(); ++i) unused_known_[i] = !used_[i];
        have_unused_known_ = true;
      }
      // Which parameters were used on some rank: after the buckets, same order everywhere.
      at::Tensor used = at::empty({static_cast<int64_t>(params_.size())}, at::kInt);
      int* counts = host_data<int>(used, "DistributedDataParallel's unused-parameter counts");
      for (size_t i = 0; i < params_.size(); ++i) counts[i] = used_[i];
      used_counts = control_tensor(used, group_->device());  // a GPU's: queued, nothing waited for
      AllReduceOptions o;
      o.async_op = true;
      used_work = group_->all_reduce(used_counts, o);
    }
  } else if (next_launch_ < buckets_.size()) {
    fail_unfinished();
  }
  timeline::Span waiting("compute", "wait for buckets");  // inside backward: what the reductions leave exposed
  try {
    const bool tl = timeline::enabled();
    for (auto& bucket : buckets_) {
      at::Tensor result = bucket.work.value();
      if (tl && bucket.launched_us >= 0) record_completed_buckets();  // this one, and any others done
      if (result.defined() && !result.is_same(bucket.flat)) bucket.flat.copy_(result);
    }
    if (used_counts.defined()) {
      used_work.wait();
      const at::Tensor used = host_copy(used_counts);  // a GPU's: the one read of this backward, as PyTorch's
      const int* counts = host_data<int>(used, "DistributedDataParallel's unused-parameter counts");
      for (size_t i = 0; i < params_.size(); ++i) globally_used[i] = counts[i] > 0;
      if (opts_.static_graph) globally_used_ = globally_used;
    }
  } catch (...) {
    reset_iteration();
    throw;
  }
  waiting.end();
  // Averaged gradients back into param.grad(); a parameter no rank used keeps its grad.
  for (size_t i = 0; i < params_.size() && !world_of_one_; ++i) {
    if (!globally_used[i]) continue;
    const at::Tensor& view = buckets_[bucket_slot_[i].first].views[bucket_slot_[i].second];
    at::Tensor& grad = params_[i].mutable_grad();
    if (opts_.gradient_as_bucket_view)
      grad = view;
    else if (grad.defined())
      grad.copy_(view);
    else
      grad = view.clone();
  }
  timings_.add(first_launch_, backward_end, DeviceMark::now(device_));
  if (!rebuilt_) rebuild_due_ = true;
  reset_iteration();
  expect_gradients_ = false;  // until the next forward
}

const DDPStats& Reducer::stats() const { return timings_.stats(); }

void Reducer::settle_divisor() {
  if (divisor_source_ && divisor_ == 0) divisor_ = divisor_source_();
}

double Reducer::divisor() {
  if (divisor_ == 0) divisor_ = divisor_source_ ? divisor_source_() : group_->size();
  return divisor_;
}

void Reducer::reset_iteration() {
  in_backward_ = false;
  divisor_ = 0;
  divisor_source_ = nullptr;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(used_.begin(), used_.end(), 0);
  if (!(opts_.static_graph && have_unused_known_)) have_unused_known_ = false;
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work = Work();
    b.launched_us = -1;
  }
  next_launch_ = 0;
  first_launch_ = last_launch_ = DeviceMark();
}

}  // namespace ddp::detail
