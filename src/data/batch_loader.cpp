#include "ddp/data/batch_loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/dist/device.h"
#include "ddp/errors.h"

namespace ddp::data {
namespace {

[[noreturn]] void bad(const std::string& what) { throw ddp::InvalidArgument("BatchLoader: " + what); }

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t BatchLoader::batch_seed(uint64_t seed, int64_t epoch, int64_t batch) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(batch));
}

struct BatchLoader::State {
  int64_t n = 0;                                                                           // samples
  std::function<Batch(const std::vector<int64_t>&, at::Generator&, int64_t epoch)> fetch;  // a batch of these samples
  BatchLoaderOptions opts;

  std::mutex mu;
  std::condition_variable work_cv;   // workers wait for room ahead of next() or a new epoch
  std::condition_variable ready_cv;  // next() waits for its batch
  bool stop = false;
  bool started = false;
  uint64_t generation = 0;  // bumped by start_epoch; batches of older generations are dropped
  std::shared_ptr<const std::vector<int64_t>> indices;
  int64_t epoch = 0;
  int64_t total = 0;        // batches in the epoch
  int64_t next_build = 0;   // the workers' next batch
  int64_t next_return = 0;  // next()'s next batch
  struct Ready {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Ready> ready;  // by batch number: workers may finish out of order
  std::vector<std::thread> workers;

  int64_t ahead() const { return std::max(opts.prefetch, opts.workers); }

  // Batch b of the epoch over `idx`, with its own generator.
  Batch build(const std::vector<int64_t>& idx, int64_t ep, int64_t b) const {
    const int64_t size = static_cast<int64_t>(idx.size());
    const int64_t start = b * opts.batch_size, len = std::min(opts.batch_size, size - start);
    std::vector<int64_t> mine(idx.begin() + start, idx.begin() + start + len);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed(opts.seed, ep, b));
    Batch out = fetch(mine, gen, ep);
    if (!out.data.defined() || out.data.dim() == 0 || out.data.size(0) != len || !out.target.defined() ||
        out.target.dim() == 0 || out.target.size(0) != len)
      throw ddp::Error("BatchLoader: " + std::string(opts.augment || opts.augment_epoch ? "augment" : "fetch") +
                       " returned " +
                       (out.data.defined() ? "sizes " + c10::str(out.data.sizes()) : std::string("no tensor")) +
                       " for batch " + std::to_string(b) + " of epoch " + std::to_string(ep) + "; expected " +
                       std::to_string(len) + " samples along dim 0");
    if (opts.pin_memory) out = {pinned(out.data), pinned(out.target)};  // here, off the training thread
    return out;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || (started && next_build < total && next_build - next_return < ahead()); });
      if (stop) return;
      const uint64_t gen = generation;
      const auto idx = indices;
      const int64_t ep = epoch, b = next_build++;
      lock.unlock();
      Ready r;
      try {
        r.batch = build(*idx, ep, b);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      if (gen == generation) {
        ready.emplace(b, std::move(r));
        ready_cv.notify_all();
      }
    }
  }
};

namespace {
void check_options(const BatchLoaderOptions& options) {
  if (options.batch_size < 1) bad("batch_size must be >= 1, got " + std::to_string(options.batch_size));
  if (options.prefetch < 0) bad("prefetch must be >= 0, got " + std::to_string(options.prefetch));
  if (options.workers < 1) bad("workers must be >= 1, got " + std::to_string(options.workers));
  if (options.augment && options.augment_epoch) bad("set augment or augment_epoch, not both");
  if (options.pin_memory && cuda_device_count() == 0)
    bad("pin_memory needs a GPU (pinned memory is CUDA's) and this process sees none; leave it off for the CPU");
}
}  // namespace

BatchLoader::BatchLoader(at::Tensor data, at::Tensor targets, BatchLoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (!data.defined() || data.dim() < 1) bad("data must be a tensor [N, ...]");
  if (!targets.defined() || targets.dim() < 1 || targets.size(0) != data.size(0))
    bad("targets must have N = data.size(0) = " + std::to_string(data.size(0)) + " rows, got " +
        (targets.defined() ? "sizes " + c10::str(targets.sizes()) : std::string("an undefined tensor")));
  check_options(options);
  auto augment = options.augment;
  auto augment_epoch = options.augment_epoch;
  state_->n = data.size(0);
  state_->fetch = [data = std::move(data), targets = std::move(targets), augment, augment_epoch](
                      const std::vector<int64_t>& idx, at::Generator& gen, int64_t epoch) {
    at::Tensor index = at::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, at::kLong);
    Batch out{data.index_select(0, index), targets.index_select(0, index)};
    if (augment) out.data = augment(out.data, gen);
    if (augment_epoch) out.data = augment_epoch(out.data, gen, epoch);
    return out;
  };
  state_->opts = std::move(options);
  for (int w = 0; state_->opts.prefetch > 0 && w < state_->opts.workers; ++w)
    state_->workers.emplace_back([s = state_.get()] { s->run(); });
}

BatchLoader::BatchLoader(int64_t size, FetchBatch fetch, BatchLoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (size < 0) bad("size must be >= 0, got " + std::to_string(size));
  if (!fetch) bad("fetch must be a function");
  check_options(options);
  options.augment = nullptr;
  options.augment_epoch = nullptr;
  state_->n = size;
  state_->fetch = [fetch = std::move(fetch)](const std::vector<int64_t>& idx, at::Generator& gen, int64_t) {
    return fetch(idx, gen);
  };
  state_->opts = std::move(options);
  for (int w = 0; state_->opts.prefetch > 0 && w < state_->opts.workers; ++w)
    state_->workers.emplace_back([s = state_.get()] { s->run(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  for (auto& w : state_->workers) w.join();
}

void BatchLoader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches) {
  State& s = *state_;
  const int64_t n = s.n, size = static_cast<int64_t>(indices.size());
  for (int64_t i = 0; i < size; ++i)
    if (indices[i] < 0 || indices[i] >= n)
      bad("start_epoch: indices[" + std::to_string(i) + "] = " + std::to_string(indices[i]) + " is outside [0, " +
          std::to_string(n) + ")");
  const int64_t bs = s.opts.batch_size;
  const int64_t total = s.opts.drop_last ? size / bs : (size + bs - 1) / bs;
  if (skip_batches < 0 || skip_batches > total)
    bad("start_epoch: skip_batches " + std::to_string(skip_batches) + " is outside [0, " + std::to_string(total) +
        "] (the epoch has " + std::to_string(total) + " batches)");
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.generation;
  s.indices = std::make_shared<const std::vector<int64_t>>(std::move(indices));
  s.epoch = epoch;
  s.total = total;
  s.next_build = s.next_return = skip_batches;
  s.ready.clear();  // what was prepared for the previous epoch
  s.started = true;
  s.work_cv.notify_all();
}

std::optional<Batch> BatchLoader::next() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.started) bad("next() called before start_epoch()");
  if (s.next_return >= s.total) return std::nullopt;
  if (s.opts.prefetch == 0) {  // synchronous: build it here
    const int64_t b = s.next_return++;
    auto idx = s.indices;
    const int64_t ep = s.epoch;
    lock.unlock();
    return s.build(*idx, ep, b);
  }
  s.ready_cv.wait(lock, [&] { return s.ready.count(s.next_return) > 0; });
  auto it = s.ready.find(s.next_return);
  State::Ready r = std::move(it->second);
  s.ready.erase(it);
  ++s.next_return;
  s.work_cv.notify_all();
  lock.unlock();
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

int64_t BatchLoader::batches_in_epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->total;
}

}  // namespace ddp::data
