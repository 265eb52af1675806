#include "parallel/sharded_unit.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "ddp/errors.h"
#include "dist/device_scope.h"
#include "dist/error_context.h"

namespace ddp::detail {

ShardedUnit::ShardedUnit(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroup& group,
                         std::shared_ptr<GatheredBytes> gathered)
    : params_(std::move(params)), names_(std::move(names)), group_(group), tracker_(std::move(gathered)) {
  const int world = group_.size();
  for (size_t i = 0; i < params_.size(); ++i) {
    ErrorContext ctx{group_.backend(), group_.rank(), world, "FullyShardedDataParallel"};
    if (params_[i].scalar_type() != params_[0].scalar_type())
      throw_invalid(ctx, "parameter '" + names_[i] + "' is " + std::string(c10::toString(params_[i].scalar_type())) +
                             " but '" + names_[0] + "' of the same unit is " + c10::toString(params_[0].scalar_type()) +
                             "; a unit's parameters must share a dtype");
    if (!params_[i].requires_grad())
      throw_invalid(ctx, "parameter '" + names_[i] +
                             "' does not require grad; frozen parameters cannot be sharded (keep them out of the "
                             "Sequential or make them buffers)");
    offsets_.push_back(numel_);
    shapes_.push_back(params_[i].sizes().vec());
    numel_ += params_[i].numel();
  }
  shard_numel_ = (numel_ + world - 1) / world;
  padded_ = shard_numel_ * world;
  at::NoGradGuard no_grad;
  // Rank 0's values, flattened, everywhere; this rank keeps its shard.
  full_ = at::zeros({padded_}, params_[0].options().requires_grad(false));
  tracker_->now += full_.nbytes();
  tracker_->peak = std::max(tracker_->peak, tracker_->now);
  for (size_t i = 0; i < params_.size(); ++i)
    full_.narrow(0, offsets_[i], params_[i].numel()).copy_(params_[i].detach().reshape({-1}));
  if (world > 1) group_.broadcast(full_);
  shard_ = full_.narrow(0, int64_t(group_.rank()) * shard_numel_, shard_numel_).clone().requires_grad_(true);
  for (const auto& p : params_) accumulators_.push_back(torch::autograd::impl::grad_accumulator(p));
  gathered_ = true;
  bind();
  rest();
}

// Shares the full buffer's storage, whose memory comes and goes.
void ShardedUnit::allocate_full() {
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(padded_) * full_.element_size();
  if (storage->nbytes() == bytes) return;
  detail::DeviceScope on(full_);  // a GPU's allocator takes the current device: the unit's
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  tracker_->now += int64_t(bytes);
  tracker_->peak = std::max(tracker_->peak, tracker_->now);
}

// The module's parameters become views into the full buffer (set_data keeps
// each parameter's identity, autograd metadata and gradient accumulator).
void ShardedUnit::bind() {
  if (bound_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor view = at::empty({0}, full_.options());
    view.set_(full_.storage(), offsets_[i], shapes_[i]);
    params_[i].set_data(view);
  }
  bound_ = true;
}

void ShardedUnit::gather(bool refresh) {
  if (gathered_ && !refresh) {
    bind();
    return;
  }
  at::NoGradGuard no_grad;
  allocate_full();
  if (group_.size() == 1) {
    full_.copy_(shard_.detach());
  } else {
    std::vector<at::Tensor> blocks = full_.chunk(group_.size());
    group_.all_gather(blocks, shard_.detach());
  }
  gathered_ = true;
  bind();
}

void ShardedUnit::release() {
  tracker_->now -= full_bytes_now();
  full_.storage().unsafeGetStorageImpl()->reset();
  gathered_ = false;
}

void ShardedUnit::rest() {
  release();
  at::NoGradGuard no_grad;
  for (auto& p : params_) p.set_data(at::empty({0}, full_.options()));
  bound_ = false;
}

void ShardedUnit::reduce_gradients() {
  const int world = group_.size();
  flat_grad_ = at::zeros({padded_}, full_.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    at::Tensor out = flat_grad_.narrow(0, offsets_[i], grad.numel()).view(grad.sizes());
    // Divided while copied, as DDP does: the sum of W averages' parts is the average.
    if (world > 1)
      at::div_out(out, grad, world);
    else
      out.copy_(grad);
    grad.reset();
  }
  if (world == 1) {
    reduced_ = flat_grad_;
    work_ = Work::ready(reduced_);
    return;
  }
  reduced_ = at::empty({shard_numel_}, full_.options());
  std::vector<at::Tensor> blocks = flat_grad_.chunk(world);
  ReduceScatterOptions o;
  o.async_op = true;
  work_ = group_.reduce_scatter(reduced_, blocks, o);
}

void ShardedUnit::finish_gradients() {
  if (!reduced_.defined()) return;  // nothing in flight
  work_.wait();
  work_ = Work();
  flat_grad_ = at::Tensor();
  at::Tensor& grad = shard_.mutable_grad();
  if (grad.defined())
    grad.add_(reduced_);
  else
    grad = reduced_;
  reduced_ = at::Tensor();
}

at::Tensor ShardedUnit::gather_flat() const {
  at::NoGradGuard no_grad;
  if (group_.size() == 1) return shard_.detach().clone();
  at::Tensor flat = at::empty({padded_}, full_.options());
  std::vector<at::Tensor> blocks = flat.chunk(group_.size());
  group_.all_gather(blocks, shard_.detach());
  return flat;
}

void ShardedUnit::load_flat(const at::Tensor& flat) {
  at::NoGradGuard no_grad;
  const int64_t start = int64_t(group_.rank()) * shard_numel_;
  const int64_t n = std::max<int64_t>(0, std::min(shard_numel_, numel_ - start));
  shard_.detach().zero_();
  if (n > 0) shard_.detach().narrow(0, 0, n).copy_(flat.narrow(0, start, n));
}

void ShardedUnit::load_shard(const at::Tensor& shard) {
  at::NoGradGuard no_grad;
  shard_.detach().copy_(shard);
}

int64_t ShardedUnit::full_bytes_now() const { return int64_t(full_.storage().unsafeGetStorageImpl()->nbytes()); }

int64_t ShardedUnit::gradient_bytes_now() const {
  int64_t bytes = 0;
  for (const auto& p : params_)
    if (p.grad().defined()) bytes += p.grad().nbytes();
  if (flat_grad_.defined()) bytes += flat_grad_.nbytes();
  if (reduced_.defined() && !reduced_.is_same(flat_grad_)) bytes += reduced_.nbytes();
  return bytes;
}

}  // namespace ddp::detail
