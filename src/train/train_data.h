// The Trainer's training data: the Task's source (task_data.h) behind the background loader, each rank's
// order per epoch (the DistributedSampler's, or a seeded shuffle of its shard) and the epoch's length.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/data/batch_loader.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/dist/process_group.h"
#include "ddp/train/task.h"

namespace ddp::train::detail {

struct TrainDataOptions {
  int64_t batch_size = 0, accumulate = 1, epochs = 1;
  int64_t workers = 0;  // the loader's threads for fetched data
  uint64_t seed = 0;
  bool pin_memory = false;  // batches in pinned host memory, for a GPU's copies
  // In-place recovery (ddp::Membership): the world the job was launched with, whose epochs and global batches
  // (batch_size x launch_world samples each) every later world trains, split among its ranks; 0: the group's.
  int launch_world = 0;
};

// InvalidArgument unless `d` (the Task's `split`: "train" or "test") is usable: TensorData with x and y of the
// same first dimension (sharded: total > 0), or FetchData with a function and total > 0 (training: no indices).
void check_data(const DataSource& d, const std::string& split);

class TrainData {
 public:
  TrainData() = default;
  // The Task's training data (checked), augmented and prepared (Task::augment, prepare_input) on the loader's
  // threads. A collective: every rank must have as many micro-batches per epoch (InvalidArgument on every rank).
  TrainData(const Task& task, const TrainDataOptions& o, ProcessGroup& group);

  // Starts epoch `epoch` at micro-batch `micro`; next() gives its batches (nullopt at the end).
  void start_epoch(int64_t epoch, int64_t micro);
  std::optional<data::Batch> next() { return loader_->next(); }

  int64_t total() const { return total_; }  // training samples over all ranks
  bool sharded() const { return !sampler_; }
  int64_t micro_per_epoch() const { return micro_per_epoch_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return total_steps_; }
  // This rank's samples per micro-batch, and what its mean loss is scaled by before backward so that the
  // ranks' averaged gradients are the global batch's mean: b * world / global batch (1 where the world divides
  // the launch's global batch evenly).
  int64_t batch_size() const { return batch_size_; }
  double loss_scale() const { return loss_scale_; }

 private:
  std::vector<int64_t> epoch_order(int64_t epoch);
  std::vector<int64_t> share_of_launch_order(int64_t epoch);

  std::unique_ptr<DistributedSampler> sampler_;  // none when the data is this rank's shard
  std::unique_ptr<data::BatchLoader> loader_;
  int64_t shard_size_ = 0, total_ = 0;
  uint64_t seed_ = 0;
  int rank_ = 0, world_ = 1, launch_world_ = 0;
  int64_t batch_size_ = 0, global_batch_ = 0;
  double loss_scale_ = 1.0;
  int64_t micro_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
};

}  // namespace ddp::train::detail
