#include "ddp/parallel/join.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "ddp/dist/collectives.h"
#include "ddp/dist/device.h"
#include "ddp/dist/errors.h"
#include "dist/error_context.h"
#include "dist/host_memory.h"
#include "parallel/reducer.h"

namespace ddp {
namespace {

std::string rank_list(const std::vector<float>& counts, int world, bool active) {
  std::string out;
  for (int r = 0; r < world; ++r)
    if ((counts[r] > 0) == active) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

Join::Join(DistributedDataParallelBase& model, JoinOptions options) : model_(&model), options_(options) {
  const ProcessGroup& g = *model.group_;
  rank_ = g.rank();
  world_ = g.size();
  if (!options_.enable) {
    model_ = nullptr;
    finished_ = true;
    return;
  }
  if (model.join_) {
    ErrorContext ctx{g.backend(), rank_, world_, "Join"};
    throw InvalidArgument(ctx.prefix() + "the model already has a Join attached; finish() it first");
  }
  model.join_ = this;
}

Join::~Join() { detach(); }

void Join::detach() {
  if (!model_) return;
  model_->join_ = nullptr;
  if (model_->reducer_) model_->reducer_->set_divisor_source(nullptr);
  model_ = nullptr;
}

// The join all_reduce: a 1 in this rank's slot (a rank out of inputs sends 0),
// then what this iteration synchronises. On gloo asynchronous (as PyTorch's):
// it overlaps the forward, unless its result is needed at once. On mpi
// blocking: mpi runs a blocking call on this thread when idle, while an async
// one goes through its communication thread and delays the buckets queued
// behind it (MLP, world 2: +0.3-0.5 ms/step async on gloo, +1.1-1.6 blocking;
// on mpi +7 ms async, within noise blocking: docs/ddp.md).
void Join::on_forward(bool training, bool sync) {
  if (!have_counts_) joined_counts();  // the previous iteration's, if never waited for
  at::Tensor flags = at::zeros({world_ + kNumFlags}, at::kFloat);
  float* t = detail::host_data<float>(flags, "Join's flags");
  t[rank_] = 1;
  t[world_ + kTraining] = training;
  t[world_ + kSync] = sync;
  pending_tensor_ = control_tensor(flags, model_->group_->device());  // a GPU's: queued, nothing waited for
  AllReduceOptions o;
  o.async_op = model_->group_->backend() != "mpi";
  pending_ = model_->group_->all_reduce(pending_tensor_, o);
  have_counts_ = false;
  if (options_.throw_on_early_termination) joined_counts();
}

const std::vector<float>& Join::joined_counts() {
  if (!have_counts_ && pending_tensor_.defined()) {
    pending_.wait();
    const at::Tensor flags = host_copy(pending_tensor_);
    const float* t = detail::host_data<float>(flags, "Join's flags");
    counts_.assign(t, t + world_ + kNumFlags);
    pending_ = Work();
  }
  have_counts_ = true;
  if (options_.throw_on_early_termination && !finished_ && !counts_.empty() && active_ranks(counts_) < world_) {
    const ProcessGroup& g = *model_->group_;
    ErrorContext ctx{g.backend(), rank_, world_, "Join"};
    const std::string out = rank_list(counts_, world_, false);
    detach();
    throw Error(ctx.prefix() + "rank(s) " + out +
                " ran out of inputs; throw_on_early_termination stops every rank in this iteration");
  }
  return counts_;
}

std::function<double()> Join::divisor_source() {
  if (options_.divide_by_initial_world_size) return nullptr;
  return [this] { return static_cast<double>(active_ranks(joined_counts())); };
}

int Join::active_ranks(const std::vector<float>& counts) const {
  int n = 0;
  for (int r = 0; r < world_; ++r) n += counts[r] > 0;
  return n;
}

int Join::highest_active_rank(const std::vector<float>& counts) const {
  for (int r = world_; r-- > 0;)
    if (counts[r] > 0) return r;
  return 0;
}

void Join::finish() {
  if (finished_ || !model_) return;
  finished_ = true;
  if (!have_counts_) joined_counts();  // this rank's last forward
  ProcessGroup& g = *model_->group_;
  bool last_joiner = true;
  for (;;) {
    at::Tensor t = at::zeros({world_ + kNumFlags}, at::TensorOptions(g.device()).dtype(at::kFloat));
    g.all_reduce(t);
    t = host_copy(t);
    const float* c = detail::host_data<float>(t, "Join's flags");
    counts_.assign(c, c + t.numel());
    if (active_ranks(counts_) == 0) break;
    if (options_.throw_on_early_termination) {
      ErrorContext ctx{g.backend(), rank_, world_, "Join"};
      const std::string still = rank_list(counts_, world_, true);
      detach();
      throw Error(ctx.prefix() + "this rank ran out of inputs while rank(s) " + still +
                  " had more; throw_on_early_termination stops every rank in this iteration");
    }
    shadow_iteration(counts_);
    last_joiner = false;
    ++shadowed_;
  }
  sync_final_model(last_joiner);
  detach();
}

// What an active rank's forward (with gradients) and backward issue
// (before_forward, the reducer), in the same order, decided by the flags the
// active ranks sent.
void Join::shadow_iteration(const std::vector<float>& counts) {
  const bool training = counts[world_ + kTraining] > 0, sync = counts[world_ + kSync] > 0;
  DistributedDataParallelBase& m = *model_;
  if (m.reducer_) m.reducer_->shadow_forward(training && sync);
  if (m.broadcasts_buffers(true, training)) broadcast_coalesced(m.buffers_, highest_active_rank(counts), m.group_);
  if (m.reducer_ && sync) m.reducer_->shadow_backward();
}

// As PyTorch's _sync_final_model: the highest rank among those that finished
// last (which trained on every iteration) broadcasts parameters and buffers.
void Join::sync_final_model(bool last_joiner) {
  ProcessGroup& g = *model_->group_;
  at::Tensor root = at::full({1}, last_joiner ? rank_ : -1, at::TensorOptions(g.device()).dtype(at::kFloat));
  AllReduceOptions o;
  o.op = ReduceOp::MAX;
  g.all_reduce(root, o);
  std::vector<at::Tensor> state = model_->module_state();
  if (world_ > 1 && !state.empty()) {
    at::NoGradGuard no_grad;
    broadcast_coalesced(state, static_cast<int>(host_copy(root).item<float>()), model_->group_);
  }
}

}  // namespace ddp
