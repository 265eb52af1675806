// DistributedSampler with PyTorch's semantics and order: each of num_replicas
// ranks gets a disjoint, equally long slice of the (shuffled) indices.
//
//   ddp::DistributedSampler sampler(dataset.size().value());   // group from ddp::init_process_group
//   auto loader = torch::data::make_data_loader(dataset, sampler, batch_size);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                                  // reshuffles with seed + epoch
//     for (auto& batch : *loader) ...
//   }
//
// The shuffled order equals torch.utils.data.DistributedSampler's for the same
// arguments. Without drop_last the indices are padded by repeating from the
// start; with it they are cut to a multiple of num_replicas. `exact` is for
// evaluation: no padding and no cut, shards of uneven length, every sample
// seen by exactly one rank.
#pragma once
#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp {

struct DistributedSamplerOptions {
  int64_t num_replicas = -1;  // -1: the default group's size (1 without one)
  int64_t rank = -1;          // -1: the default group's rank (0 without one)
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool exact = false;  // evaluation: uneven shards, no padding
};

class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  // Throws std::invalid_argument for a rank outside [0, num_replicas) or
  // num_replicas < 1, and when exact and drop_last are both set.
  explicit DistributedSampler(size_t dataset_size, DistributedSamplerOptions options = {});

  // Reshuffles for this epoch (seed + epoch) and restarts iteration.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in order.
  std::vector<size_t> indices() const;
  // How many indices this rank gets per epoch (num_samples in PyTorch).
  size_t size() const;
  size_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return opts_; }

  // torch::data::samplers::Sampler: restart (optionally with a new dataset size).
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  // Epoch and position, so a resumed run continues where it stopped.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  size_t dataset_size_;
  DistributedSamplerOptions opts_;
  int64_t epoch_ = 0;
  std::vector<size_t> current_;
  size_t position_ = 0;
};

}  // namespace ddp
