#include "train_data.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "ddp/dist/collectives.h"
#include "ddp/errors.h"
#include "dist/host_memory.h"
#include "random_streams.h"

namespace ddp::train::detail {

void check_data(const DataSource& d, const std::string& split) {
  const std::string what = "Trainer: the Task's " + split + " data";
  if (std::holds_alternative<std::monostate>(d))
    throw InvalidArgument(what + " is not set: task." + split + " = TensorData{x, y} (tensors), or FetchData (" +
                          "batches fetched by the loader's threads; FetchData::of(a LibTorch dataset))");
  if (const auto* t = std::get_if<TensorData>(&d)) {
    if (!t->x.defined() || !t->y.defined() || t->x.dim() == 0 || t->y.dim() == 0 || t->x.size(0) != t->y.size(0))
      throw InvalidArgument(what + ": TensorData's x and y must both be tensors with the same first dimension " +
                            "(samples)");
    if (t->sharded && t->total < t->y.size(0))
      throw InvalidArgument(what + ": a shard of " + std::to_string(t->y.size(0)) + " samples with total " +
                            std::to_string(t->total) + "; total is the samples over all ranks' shards");
    return;
  }
  const auto& f = std::get<FetchData>(d);
  if (!f.fetch || f.total < 1) throw InvalidArgument(what + ": FetchData needs a fetch function and total > 0 samples");
  if (split == "train" && !f.indices.empty())
    throw InvalidArgument(what + ": FetchData's indices are for evaluation; for training the DistributedSampler " +
                          "picks each rank's samples: leave them empty");
}

TrainData::TrainData(const Task& task, const TrainDataOptions& o, ProcessGroup& group)
    : seed_(o.seed), rank_(group.rank()) {
  check_data(task.train, "train");
  data::BatchLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.drop_last = true;
  lo.pin_memory = o.pin_memory;  // the step's copies to a GPU then wait for nothing
  lo.seed = stream_seed(o.seed, Stream::kAugment, rank_);
  lo.augment_epoch = task.augment;
  bool sharded = false;
  if (const auto* f = std::get_if<FetchData>(&task.train)) {  // made per batch: the workers fetch this rank's only
    data::FetchBatch fetch = f->fetch;
    if (task.prepare_input)
      fetch = [fetch, prepare = task.prepare_input](const std::vector<int64_t>& idx, at::Generator& gen) {
        data::Batch b = fetch(idx, gen);
        b.data = prepare(b.data);
        return b;
      };
    lo.workers = static_cast<int>(o.workers);
    lo.prefetch = lo.workers + 1;
    shard_size_ = total_ = f->total;
    loader_ = std::make_unique<data::BatchLoader>(f->total, fetch, lo);
  } else {
    const auto& t = std::get<TensorData>(task.train);
    if (task.prepare_input)
      lo.augment_epoch = [augment = task.augment, prepare = task.prepare_input](const at::Tensor& b, at::Generator& gen,
                                                                                int64_t epoch) {
        return prepare(augment ? augment(b, gen, epoch) : b);
      };
    sharded = t.sharded;
    shard_size_ = t.y.size(0);
    total_ = sharded ? t.total : shard_size_;
    loader_ = std::make_unique<data::BatchLoader>(t.x, t.y, lo);
  }
  int64_t per_rank = shard_size_;
  if (!sharded) {
    DistributedSamplerOptions so;
    so.num_replicas = group.size();
    so.rank = rank_;
    so.seed = o.seed;
    sampler_ = std::make_unique<DistributedSampler>(static_cast<size_t>(per_rank), so);
    per_rank = static_cast<int64_t>(sampler_->size());
  }
  micro_per_epoch_ = per_rank / o.batch_size / o.accumulate * o.accumulate;
  // Every rank must train as many micro-batches per epoch (a rank with more would wait forever in DDP's
  // all_reduce): equal unless a Task's own shards differ in size.
  at::Tensor range = at::tensor({micro_per_epoch_, -micro_per_epoch_}, at::kLong);
  group.all_reduce(range, op(ReduceOp::MAX)).wait();
  const int64_t most = range[0].item<int64_t>(), fewest = -range[1].item<int64_t>();
  if (most != fewest)
    throw InvalidArgument("Trainer: the ranks' training shards give " + std::to_string(fewest) + " to " +
                          std::to_string(most) + " batches per epoch (this rank: " + std::to_string(micro_per_epoch_) +
                          "); every rank's TensorData::shard must give the same number of batches");
  steps_per_epoch_ = micro_per_epoch_ / o.accumulate;
  if (steps_per_epoch_ < 1)
    throw InvalidArgument("ddp-train: each rank has " + std::to_string(per_rank) + " training samples, fewer than " +
                          "one step of --batch-size " + std::to_string(o.batch_size) + " x --accumulate " +
                          std::to_string(o.accumulate) + "; lower them or use more data");
  total_steps_ = steps_per_epoch_ * o.epochs;
}

// This rank's sample order for an epoch: the DistributedSampler's, or a seeded shuffle of its shard.
std::vector<int64_t> TrainData::epoch_order(int64_t epoch) {
  if (sampler_) {
    sampler_->set_epoch(epoch);
    auto idx = sampler_->indices();
    return std::vector<int64_t>(idx.begin(), idx.end());
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(stream_seed(seed_, Stream::kShardOrder, rank_, epoch));
  at::Tensor perm = at::randperm(shard_size_, gen, at::kLong);
  const int64_t* p = ddp::detail::host_data<int64_t>(perm, "the epoch's order");
  return std::vector<int64_t>(p, p + perm.numel());
}

void TrainData::start_epoch(int64_t epoch, int64_t micro) { loader_->start_epoch(epoch_order(epoch), epoch, micro); }

}  // namespace ddp::train::detail
