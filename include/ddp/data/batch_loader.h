// A batch loader for in-memory data: gathers each batch (index_select) and
// augments it on a background thread, `prefetch` batches ahead of the
// training loop. Deterministic: batch b of epoch e is augmented with a
// generator seeded from (seed, e, b) only, so results never depend on thread
// timing, and a run resumed mid-epoch (skip_batches) sees the same batches.
//
//   ddp::data::BatchLoaderOptions opts;
//   opts.batch_size = 128;
//   opts.augment = [](const at::Tensor& b, at::Generator& gen) {
//     return ddp::data::random_horizontal_flip(ddp::data::random_crop(b, 4, gen), 0.5, gen);
//   };
//   ddp::data::BatchLoader loader(shard.x, shard.y, opts);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(order_for(epoch), epoch);        // e.g. a DistributedSampler's indices
//     while (auto batch = loader.next()) step(batch->data, batch->target);
//   }
//
// Samples that are not in memory (files decoded per batch, e.g. an ImageFolder)
// come through a fetch function instead, run on `workers` background threads:
//
//   ddp::data::BatchLoader loader(folder.size(), [&](const std::vector<int64_t>& idx, at::Generator& gen) {
//     return ddp::data::load_image_batch(folder, idx, pipeline, gen);
//   }, opts);
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace ddp::data {

struct Batch {
  at::Tensor data;
  at::Tensor target;
};

struct BatchLoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;
  int prefetch = 2;         // batches prepared ahead on the background thread(s) (0: synchronous)
  int workers = 1;          // background threads building batches (>= 1; batches still come in order)
  bool pin_memory = false;  // batches in pinned host memory, pinned on the workers, for non-blocking copies to a GPU
  uint64_t seed = 0;  // augmentation generator: seeded from (seed, epoch) so results never depend on thread timing
  std::function<at::Tensor(const at::Tensor& batch, at::Generator& gen)> augment;  // optional, applied to data only
  // Like augment, also given the epoch (e.g. flips that alternate by epoch); set at most one of the two.
  std::function<at::Tensor(const at::Tensor& batch, at::Generator& gen, int64_t epoch)> augment_epoch;
};

// Builds the batch of these sample indices (in order), drawing randomness only from gen.
using FetchBatch = std::function<Batch(const std::vector<int64_t>& indices, at::Generator& gen)>;

class BatchLoader {
 public:
  // Throws ddp::InvalidArgument when data and targets differ in length, batch_size < 1 or prefetch < 0.
  BatchLoader(at::Tensor data, at::Tensor targets, BatchLoaderOptions options);  // data [N, ...], targets [N]
  // Samples 0..size-1 made by `fetch` (options.augment is not applied; fetch does its own).
  BatchLoader(int64_t size, FetchBatch fetch, BatchLoaderOptions options);
  ~BatchLoader();  // stops and joins the thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Begin an epoch over these indices (in this order), skipping the first skip_batches batches
  // (for resuming mid-epoch: the augmentation of later batches must equal an unskipped run's).
  // Throws ddp::InvalidArgument for an index outside [0, N) or skip_batches outside [0, batches_in_epoch()].
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches = 0);
  // Next batch of the epoch, or nullopt at its end. An exception thrown on the background thread
  // (e.g. by augment) is rethrown here; the next call goes on with the following batch.
  // Throws ddp::InvalidArgument before the first start_epoch.
  std::optional<Batch> next();
  int64_t batches_in_epoch() const;  // for the indices given to start_epoch (skipped batches included)

  // The seed of the augmentation generator of batch b of epoch e: a hash of (seed, epoch, b).
  static uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t batch);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddp::data
