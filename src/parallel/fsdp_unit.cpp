#include "parallel/fsdp_unit.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "dist/device_scope.h"
#include "dist/error_context.h"

namespace ddp::detail {
namespace {

std::vector<int64_t> local_shape(const ShardedParam& p) {
  std::vector<int64_t> s = p.shape;
  if (s.empty()) return {p.local_rows};  // a 0-dim parameter is one row
  s[0] = p.local_rows;
  return s;
}

}  // namespace

FsdpUnit::FsdpUnit(std::string name, std::vector<ShardedParam> params, ProcessGroup& group,
                   std::shared_ptr<GatheredBytes> bytes, UnitPrecision precision, ProcessGroup* replicate)
    : name_(std::move(name)),
      params_(std::move(params)),
      group_(group),
      replicate_(replicate),
      bytes_(std::move(bytes)),
      precision_(precision) {
  const int w = group_.size(), r = group_.rank();
  if (params_.empty()) return;
  const at::Tensor& first = params_[0].param;
  ErrorContext ctx{group_.backend(), r, w, "fully_shard"};
  for (auto& p : params_) {
    if (p.param.scalar_type() != first.scalar_type() || p.param.device() != first.device())
      throw_invalid(ctx, "unit '" + name_ + "': parameter '" + p.names[0] + "' is " +
                             c10::toString(p.param.scalar_type()) + " on " + p.param.device().str() + " but '" +
                             params_[0].names[0] + "' is " + c10::toString(first.scalar_type()) + " on " +
                             first.device().str() + "; a unit's parameters share a dtype and a device");
    p.shape = p.param.sizes().vec();
    p.rows = p.shape.empty() ? 1 : p.shape[0];
    p.row_numel = 1;
    for (size_t d = 1; d < p.shape.size(); ++d) p.row_numel *= p.shape[d];
    p.chunk = (p.rows + w - 1) / w;
    p.local_rows = rows_of_rank(p, r);
    p.packed_offset = packed_numel_;
    packed_numel_ += p.chunk * p.row_numel;
    p.full_offset = full_numel_;
    full_numel_ += p.rows * p.row_numel;
    p.trainable = p.param.requires_grad();
    if (p.trainable) {
      ++trainable_;
      accumulators_.push_back(torch::autograd::impl::grad_accumulator(p.param));
    }
  }
  direct_ = w > 1 && params_.size() == 1 && params_[0].rows % w == 0;
  at::NoGradGuard no_grad;
  DeviceScope on(first);
  // Rank 0's values everywhere; this rank keeps its rows.
  full_ = at::empty({full_numel_}, first.options().requires_grad(false));
  track(full_.nbytes());
  for (const auto& p : params_) full_.narrow(0, p.full_offset, p.rows * p.row_numel).copy_(p.param.reshape({-1}));
  // (HSDP: each replica's from replica 0, then within the shard group: world rank 0's.)
  if (replicate_ && replicate_->size() > 1) replicate_->broadcast(full_);
  if (w > 1) group_.broadcast(full_);
  packed_ = at::zeros({packed_numel_}, full_.options());
  for (auto& p : params_) {
    at::Tensor mine = packed_.narrow(0, p.packed_offset, p.local_rows * p.row_numel);
    if (p.local_rows > 0)
      mine.copy_(full_.narrow(0, p.full_offset + r * p.chunk * p.row_numel, p.local_rows * p.row_numel));
    p.shard = mine.view(local_shape(p)).detach().requires_grad_(p.trainable);
  }
  state_ = kGathered;
  bind();
  rest();
  set_full_precision(false);
}

// At rest: the full buffer in another dtype (its memory freed).
void FsdpUnit::make_full(at::ScalarType dtype) {
  track(-full_bytes_now());
  full_ = at::empty({full_numel_}, packed_.options().dtype(dtype));
  full_.storage().unsafeGetStorageImpl()->reset();
}

void FsdpUnit::set_full_precision(bool on) {
  if (params_.empty()) return;
  const at::ScalarType dtype = on ? packed_.scalar_type() : precision_.param.value_or(packed_.scalar_type());
  if (full_.scalar_type() == dtype) return;
  rest();
  make_full(dtype);
}

void FsdpUnit::track(int64_t bytes) {
  bytes_->now += bytes;
  bytes_->peak = std::max(bytes_->peak, bytes_->now);
}

void FsdpUnit::start_gather(bool stale) {
  if (params_.empty() || state_ == kGathering || (state_ == kGathered && !stale)) return;
  state_ = kGathering;
  const int w = group_.size();
  if (w == 1 || packed_numel_ == 0) return;  // copied from the shards themselves
  at::NoGradGuard no_grad;
  DeviceScope on(packed_);
  if (full_.scalar_type() != packed_.scalar_type()) {  // mixed precision: gathered in the compute dtype
    outgoing_ = packed_.to(full_.scalar_type());
    track(outgoing_.nbytes());
  }
  if (direct_) {
    allocate_full();
  } else {
    incoming_ = at::empty({w * packed_numel_}, full_.options());
    track(incoming_.nbytes());
  }
  std::vector<at::Tensor> blocks = (direct_ ? full_ : incoming_).view({w, packed_numel_}).unbind(0);
  CollectiveOptions o;
  o.async_op = true;
  gather_work_ = group_.all_gather(blocks, outgoing_.defined() ? outgoing_ : packed_, o);
}

void FsdpUnit::finish_gather() {
  start_gather();
  if (state_ == kGathering) {
    gather_work_.wait();
    gather_work_ = Work();
    at::NoGradGuard no_grad;
    allocate_full();
    if (!direct_) copy_out(incoming_.defined() ? incoming_ : packed_, full_);
    drop_gather_buffers();
    state_ = kGathered;
  }
  bind();
}

// Block k of `gathered` (one block: this rank's shards at world 1) holds rank k's rows of every parameter.
void FsdpUnit::copy_out(const at::Tensor& gathered, at::Tensor& full) const {
  if (packed_numel_ == 0) return;
  const int64_t blocks = gathered.numel() / packed_numel_;
  at::Tensor by_rank = gathered.view({blocks, packed_numel_});
  for (const auto& p : params_) {
    at::Tensor rows = full.narrow(0, p.full_offset, p.rows * p.row_numel).view({p.rows, p.row_numel});
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t n = rows_of_rank(p, k);
      if (n > 0)
        rows.narrow(0, k * p.chunk, n).copy_(by_rank[k].narrow(0, p.packed_offset, n * p.row_numel).view({n, -1}));
    }
  }
}

void FsdpUnit::drop_gather_buffers() {
  for (at::Tensor* t : {&outgoing_, &incoming_}) {
    if (t->defined()) track(-int64_t(t->nbytes()));
    *t = at::Tensor();
  }
}

// Shares the full buffer's storage, whose memory comes and goes.
void FsdpUnit::allocate_full() {
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  const size_t bytes = size_t(full_numel_) * full_.element_size();
  if (storage->nbytes() == bytes) return;
  DeviceScope on(full_);  // a GPU's allocator takes the current device: the unit's
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  track(int64_t(bytes));
}

// The parameters become views of the full buffer (set_data keeps each one's identity and accumulator).
void FsdpUnit::bind() {
  if (bound_) return;
  at::NoGradGuard no_grad;
  size_t j = 0;
  for (auto& p : params_) {
    at::Tensor view = at::empty({0}, full_.options());
    view.set_(full_.storage(), p.full_offset, p.shape);
    p.param.set_data(view);
    if (!p.trainable) continue;
    compat::AutogradNodePtr acc = torch::autograd::impl::grad_accumulator(p.param);
    if (acc != accumulators_[j]) accumulators_changed_ = true;
    accumulators_[j++] = std::move(acc);
  }
  bound_ = true;
}

void FsdpUnit::release() {
  if (params_.empty()) return;
  if (state_ == kGathering) {  // prefetched, not used: the gather must end before its buffer goes
    gather_work_.wait();
    gather_work_ = Work();
    drop_gather_buffers();
  }
  track(-full_bytes_now());
  full_.storage().unsafeGetStorageImpl()->reset();
  state_ = bound_ ? kReleased : kRest;
}

void FsdpUnit::rest() {
  if (params_.empty()) return;
  release();
  at::NoGradGuard no_grad;
  // Empty, in the dtype the parameters are bound in (a new dtype would make autograd drop their accumulators).
  for (auto& p : params_) p.param.set_data(at::empty({0}, full_.options()));
  bound_ = false;
  state_ = kRest;
}

void FsdpUnit::reduce_gradients() {
  if (trainable_ == 0) return;
  const int w = group_.size(), replicas = replicate_ ? replicate_->size() : 1, all = w * replicas;
  at::NoGradGuard no_grad;
  DeviceScope on(packed_);
  const at::ScalarType reduce = precision_.reduce.value_or(full_.scalar_type());
  flat_grad_ = at::zeros({w * packed_numel_}, packed_.options().dtype(reduce));
  at::Tensor by_rank = flat_grad_.view({w, packed_numel_});
  for (auto& p : params_) {
    if (!p.trainable) continue;
    at::Tensor& grad = p.param.mutable_grad();
    if (!grad.defined()) continue;
    at::Tensor rows = grad.reshape({p.rows, p.row_numel});
    for (int64_t k = 0; k < w; ++k) {
      const int64_t n = rows_of_rank(p, k);
      if (n == 0) continue;
      at::Tensor out = by_rank[k].narrow(0, p.packed_offset, n * p.row_numel).view({n, p.row_numel});
      // Divided while copied, as DDP does: the sum of the ranks' averages' parts is the average (in the reduce
      // dtype; with HSDP, over every replica's ranks).
      if (all > 1 && rows.scalar_type() == reduce) {
        at::div_out(out, rows.narrow(0, k * p.chunk, n), all);
      } else {
        out.copy_(rows.narrow(0, k * p.chunk, n));
        if (all > 1) out.div_(all);
      }
    }
    grad.reset();
  }
  if (w == 1 || packed_numel_ == 0) {
    reduced_ = flat_grad_.narrow(0, 0, packed_numel_);
    work_ = Work::ready(reduced_);
  } else {
    reduced_ = at::empty({packed_numel_}, flat_grad_.options());
    std::vector<at::Tensor> blocks = by_rank.unbind(0);
    ReduceScatterOptions o;
    o.async_op = true;
    work_ = group_.reduce_scatter(reduced_, blocks, o);
  }
  if (replicas == 1 || packed_numel_ == 0) return;
  // HSDP: each replica's sum of the shard, summed over the replicas.
  AllReduceOptions o;
  o.async_op = true;
  if (w == 1) {
    work_ = replicate_->all_reduce(reduced_, o);
    return;
  }
  ProcessGroup* replicate = replicate_;
  at::Tensor reduced = reduced_;
  scatter_work_ = work_;
  work_ = work_.then([replicate, reduced](const at::Tensor&) mutable {
    replicate->all_reduce(reduced);  // on the shard group's sequencer, once its reduce-scatter is done
    return reduced;
  });
}

void FsdpUnit::finish_gradients() {
  if (!reduced_.defined()) return;  // nothing in flight
  work_.wait();
  work_ = Work();
  scatter_work_.reset();
  for (auto& p : params_) {
    if (!p.trainable) continue;
    at::Tensor& grad = p.shard.mutable_grad();
    at::Tensor part = reduced_.narrow(0, p.packed_offset, p.local_rows * p.row_numel).view(p.shard.sizes());
    if (grad.defined()) {
      grad.add_(part);
      continue;
    }
    if (part.scalar_type() != p.shard.scalar_type()) {  // reduced in another dtype: the shard's own
      grad = part.to(p.shard.scalar_type());
      continue;
    }
    // The reduced buffer's memory, as a tensor of its own (not a view: optimizers detach_() gradients).
    grad = at::empty({0}, reduced_.options());
    grad.set_(reduced_.storage(), reduced_.storage_offset() + p.packed_offset, p.shard.sizes());
  }
  flat_grad_ = at::Tensor();
  reduced_ = at::Tensor();
}

void FsdpUnit::free_scatter_input() {
  if (!scatter_work_ || !scatter_work_->is_completed()) return;
  scatter_work_.reset();
  flat_grad_ = at::Tensor();
}

std::vector<at::Tensor> FsdpUnit::full_values() const {
  std::vector<at::Tensor> out;
  if (params_.empty()) return out;
  const int w = group_.size();
  at::NoGradGuard no_grad;
  DeviceScope on(packed_);
  at::Tensor gathered = packed_;
  if (w > 1 && packed_numel_ > 0) {
    gathered = at::empty({w * packed_numel_}, packed_.options());
    std::vector<at::Tensor> blocks = gathered.view({w, packed_numel_}).unbind(0);
    group_.all_gather(blocks, packed_);
  }
  at::Tensor full = at::empty({full_numel_}, packed_.options());
  copy_out(gathered, full);
  for (const auto& p : params_) out.push_back(full.narrow(0, p.full_offset, p.rows * p.row_numel).view(p.shape));
  return out;
}

void FsdpUnit::load_full(size_t i, const at::Tensor& full) {
  ShardedParam& p = params_[i];
  if (p.local_rows == 0) return;
  at::NoGradGuard no_grad;
  at::Tensor rows = full.reshape({p.rows, p.row_numel}).narrow(0, group_.rank() * p.chunk, p.local_rows);
  p.shard.detach().copy_(rows.reshape(p.shard.sizes()));
}

void FsdpUnit::load_rows(size_t i, const at::Tensor& rows) {
  at::NoGradGuard no_grad;
  params_[i].shard.detach().copy_(rows.reshape(params_[i].shard.sizes()));
}

int64_t FsdpUnit::full_bytes_now() const {
  return full_.defined() ? int64_t(full_.storage().unsafeGetStorageImpl()->nbytes()) : 0;
}

int64_t FsdpUnit::shard_gradient_bytes() const {
  std::vector<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  for (const auto& p : params_) {
    const at::Tensor& g = p.shard.grad();
    if (!g.defined()) continue;
    const c10::StorageImpl* s = g.storage().unsafeGetStorageImpl();
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    bytes += int64_t(s->nbytes());
  }
  return bytes;
}

int64_t FsdpUnit::gradient_bytes_now() const {
  int64_t bytes = 0;
  for (const auto& p : params_)
    if (p.param.grad().defined()) bytes += p.param.grad().nbytes();
  if (flat_grad_.defined()) bytes += flat_grad_.nbytes();
  if (reduced_.defined() && !(flat_grad_.defined() && reduced_.is_alias_of(flat_grad_))) bytes += reduced_.nbytes();
  return bytes;
}

}  // namespace ddp::detail
