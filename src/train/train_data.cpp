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
    for (const at::Tensor* part : {&t->x, &t->y})
      if (!part->device().is_cpu())
        throw InvalidArgument(what + ": TensorData's " + (part == &t->x ? "x" : "y") + " is on " +
                              part->device().str() +
                              "; give it on the CPU: the loader's threads assemble and pin "
                              "each batch there, and the Trainer copies it to --device one step ahead");
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

// The launch world's global batch split over `world` ranks: rank r's share of each batch of `global` samples.
int64_t share(int64_t global, int world, int rank) { return global / world + (rank < global % world ? 1 : 0); }

TrainData::TrainData(const Task& task, const TrainDataOptions& o, ProcessGroup& group)
    : seed_(o.seed), rank_(group.rank()), world_(group.size()), launch_world_(o.launch_world) {
  check_data(task.train, "train");
  batch_size_ = o.batch_size;
  if (launch_world_ > 0) {
    if (const auto* t = std::get_if<TensorData>(&task.train); t && t->sharded)
      throw InvalidArgument(
          "ddp-train: in-place recovery (ddprun --recovery inplace) needs the whole training set on every rank: the "
          "Task's TensorData is sharded, and a lost rank's shard would be lost with it; use --recovery restart");
    global_batch_ = o.batch_size * launch_world_;
    batch_size_ = share(global_batch_, world_, rank_);
    if (batch_size_ * world_ != global_batch_) loss_scale_ = double(batch_size_) * world_ / double(global_batch_);
  }
  data::BatchLoaderOptions lo;
  lo.batch_size = batch_size_;
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
    so.num_replicas = launch_world_ > 0 ? launch_world_ : group.size();  // the launch world's epoch
    so.rank = launch_world_ > 0 ? 0 : rank_;
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
// The launch world's epoch: global position p = r + launch_world * i holds launch rank r's i-th index, so that
// micro-batch t covers positions [t G, (t+1) G) for G = batch_size x launch_world; this rank takes the positions
// whose offset in each such batch is its rank modulo the world (at the launch world, its own sampler's indices).
std::vector<int64_t> TrainData::share_of_launch_order(int64_t epoch) {
  std::vector<std::vector<size_t>> ranks;
  for (int r = 0; r < launch_world_; ++r) {
    DistributedSamplerOptions so = sampler_->options();
    so.rank = r;
    DistributedSampler sampler(sampler_->dataset_size(), so);
    sampler.set_epoch(epoch);
    ranks.push_back(sampler.indices());
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(micro_per_epoch_ * batch_size_));
  for (int64_t t = 0; t < micro_per_epoch_; ++t)
    for (int64_t off = rank_; off < global_batch_; off += world_) {
      const int64_t p = t * global_batch_ + off;
      mine.push_back(
          static_cast<int64_t>(ranks[static_cast<size_t>(p % launch_world_)][static_cast<size_t>(p / launch_world_)]));
    }
  return mine;
}

std::vector<int64_t> TrainData::epoch_order(int64_t epoch) {
  if (sampler_ && launch_world_ > 0) return share_of_launch_order(epoch);
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
