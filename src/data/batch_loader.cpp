#include "ddp/data/batch_loader.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

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
  at::Tensor data, targets;
  BatchLoaderOptions opts;

  std::mutex mu;
  std::condition_variable work_cv;   // the worker waits for room in `ready` or a new epoch
  std::condition_variable ready_cv;  // next() waits for a batch
  bool stop = false;
  bool started = false;
  uint64_t generation = 0;  // bumped by start_epoch; batches of older generations are dropped
  std::shared_ptr<const std::vector<int64_t>> indices;
  int64_t epoch = 0;
  int64_t total = 0;         // batches in the epoch
  int64_t next_build = 0;    // the worker's next batch
  int64_t next_return = 0;   // next()'s next batch
  struct Ready {
    int64_t b = 0;
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  std::deque<Ready> ready;
  std::thread worker;

  // Batch b of the epoch over `idx`: gathered, then augmented with its own generator.
  Batch build(const std::vector<int64_t>& idx, int64_t ep, int64_t b) const {
    const int64_t size = static_cast<int64_t>(idx.size());
    const int64_t start = b * opts.batch_size, len = std::min(opts.batch_size, size - start);
    at::Tensor index = at::from_blob(const_cast<int64_t*>(idx.data() + start), {len}, at::kLong);
    Batch out{data.index_select(0, index), targets.index_select(0, index)};
    if (opts.augment) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(batch_seed(opts.seed, ep, b));
      at::Tensor augmented = opts.augment(out.data, gen);
      if (!augmented.defined() || augmented.dim() == 0 || augmented.size(0) != len)
        throw ddp::Error("BatchLoader: augment returned " +
                         (augmented.defined() ? "sizes " + c10::str(augmented.sizes()) : std::string("no tensor")) +
                         " for batch " + std::to_string(b) + " of epoch " + std::to_string(ep) + "; expected " +
                         std::to_string(len) + " samples along dim 0");
      out.data = augmented;
    }
    return out;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] {
        return stop || (started && next_build < total && static_cast<int64_t>(ready.size()) < opts.prefetch);
      });
      if (stop) return;
      const uint64_t gen = generation;
      const auto idx = indices;
      const int64_t ep = epoch, b = next_build++;
      lock.unlock();
      Ready r;
      r.b = b;
      try {
        r.batch = build(*idx, ep, b);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      if (gen == generation) {
        ready.push_back(std::move(r));
        ready_cv.notify_all();
      }
    }
  }
};

BatchLoader::BatchLoader(at::Tensor data, at::Tensor targets, BatchLoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (!data.defined() || data.dim() < 1) bad("data must be a tensor [N, ...]");
  if (!targets.defined() || targets.dim() < 1 || targets.size(0) != data.size(0))
    bad("targets must have N = data.size(0) = " + std::to_string(data.size(0)) + " rows, got " +
        (targets.defined() ? "sizes " + c10::str(targets.sizes()) : std::string("an undefined tensor")));
  if (options.batch_size < 1) bad("batch_size must be >= 1, got " + std::to_string(options.batch_size));
  if (options.prefetch < 0) bad("prefetch must be >= 0, got " + std::to_string(options.prefetch));
  state_->data = std::move(data);
  state_->targets = std::move(targets);
  state_->opts = std::move(options);
  if (state_->opts.prefetch > 0) state_->worker = std::thread([s = state_.get()] { s->run(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  if (state_->worker.joinable()) state_->worker.join();
}

void BatchLoader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches) {
  State& s = *state_;
  const int64_t n = s.data.size(0), size = static_cast<int64_t>(indices.size());
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
  s.ready_cv.wait(lock, [&] { return !s.ready.empty(); });
  State::Ready r = std::move(s.ready.front());
  s.ready.pop_front();
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
