#include "ddp/data/distributed_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include <stdexcept>
#include <string>

#include "ddp/dist/init.h"

namespace ddp {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("DistributedSampler: " + what); }

size_t ceil_div(int64_t a, int64_t b) { return a <= 0 ? 0 : static_cast<size_t>((a + b - 1) / b); }

}  // namespace

DistributedSampler::DistributedSampler(size_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), opts_(options) {
  if ((opts_.num_replicas < 0 || opts_.rank == -1) && !is_initialized())
    bad("num_replicas and rank default to the default process group's, which is not initialized; call "
        "ddp::init_process_group() first (with no launcher it makes a world of one) or pass both");
  if (opts_.num_replicas < 0) opts_.num_replicas = get_world_size();
  if (opts_.rank == -1) opts_.rank = get_rank();
  if (opts_.num_replicas < 1) bad("num_replicas " + std::to_string(opts_.num_replicas) + " must be at least 1");
  if (opts_.rank < 0 || opts_.rank >= opts_.num_replicas)
    bad("rank " + std::to_string(opts_.rank) + " is out of range [0, " + std::to_string(opts_.num_replicas) + ")");
  if (opts_.exact && opts_.drop_last) bad("exact and drop_last exclude each other");
  reset();
}

size_t DistributedSampler::size() const {
  const auto n = static_cast<int64_t>(dataset_size_), r = opts_.num_replicas;
  if (opts_.exact) return ceil_div(n - opts_.rank, r);
  if (opts_.drop_last && n % r != 0) return ceil_div(n - r, r);  // PyTorch's math.ceil((n - R) / R)
  return ceil_div(n, r);
}

std::vector<size_t> DistributedSampler::indices() const {
  const size_t n = dataset_size_, r = static_cast<size_t>(opts_.num_replicas);
  std::vector<size_t> all(n);
  if (opts_.shuffle && n > 0) {
    // torch.Generator().manual_seed(seed + epoch); torch.randperm(n, generator=g)
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opts_.seed + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(static_cast<int64_t>(n), gen, at::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<size_t>(p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) all[i] = i;
  }
  if (!opts_.exact) {
    const size_t total = size() * r;
    if (total > n) {  // pad by repeating from the start, as often as needed
      all.reserve(total);
      for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
    } else {
      all.resize(total);
    }
  }
  std::vector<size_t> mine;
  mine.reserve(size());
  for (size_t i = static_cast<size_t>(opts_.rank); i < all.size(); i += r) mine.push_back(all[i]);
  return mine;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  reset();
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size) dataset_size_ = *new_size;
  current_ = indices();
  position_ = 0;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (position_ >= current_.size()) return torch::nullopt;
  size_t end = std::min(current_.size(), position_ + batch_size);
  std::vector<size_t> batch(current_.begin() + position_, current_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("ddp_sampler_epoch", at::tensor(epoch_, at::kLong), /*is_buffer=*/true);
  archive.write("ddp_sampler_position", at::tensor(static_cast<int64_t>(position_), at::kLong), true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor epoch, position;
  archive.read("ddp_sampler_epoch", epoch, /*is_buffer=*/true);
  archive.read("ddp_sampler_position", position, true);
  set_epoch(epoch.item<int64_t>());
  position_ = std::min(current_.size(), static_cast<size_t>(position.item<int64_t>()));
}

}  // namespace ddp
