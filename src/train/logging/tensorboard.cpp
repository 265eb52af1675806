// SummaryWriter: framed Event records buffered in memory, written by the
// calling thread every 100 records and by a flusher thread flush_secs after
// the oldest unwritten record was added.
#include "ddp/train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include "ddp/errors.h"
#include "train/logging/event_format.h"
#include "train/logging/file_io.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxPending = 100;
const char* const kWho = "SummaryWriter";

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::atomic<int> g_file_counter{0};  // PyTorch's per-process uid: writers in one second differ

}  // namespace

struct SummaryWriter::Impl {
  std::string path;
  int fd = -1;
  std::mutex mu;
  std::condition_variable wake;
  std::string pending;  // framed records not yet written
  size_t pending_records = 0;
  Clock::time_point oldest;   // when the oldest pending record was added
  Clock::duration max_delay;  // flush_secs
  bool closing = false;
  std::string error;  // the first failure; the writer is unusable afterwards
  bool error_reported = false;
  std::thread flusher;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  // Writes what is pending. Throws the stored failure, or a new one (then stored).
  void flush_locked() {
    if (!error.empty()) {
      error_reported = true;
      throw Error(error);
    }
    if (pending.empty() || fd < 0) return;
    try {
      detail::write_all(fd, pending.data(), pending.size(), path, kWho);
    } catch (const Error& e) {
      error = e.what();
      error_reported = true;
      pending.clear();
      pending_records = 0;
      throw;
    }
    pending.clear();
    pending_records = 0;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (!closing) {
      if (pending_records == 0) {
        wake.wait(lock);
        continue;
      }
      auto due = oldest + max_delay;
      if (Clock::now() < due) {
        wake.wait_until(lock, due);
        continue;
      }
      try {
        flush_locked();
      } catch (const Error&) {
        error_reported = false;  // nobody saw it yet: the next call throws it
      }
    }
  }
};

SummaryWriter::SummaryWriter(const std::string& log_dir, double flush_secs) : impl_(std::make_unique<Impl>()) {
  if (log_dir.empty()) throw InvalidArgument("SummaryWriter: log_dir is empty; give a directory such as \"runs/exp1\"");
  if (!(flush_secs > 0) || !std::isfinite(flush_secs))
    throw InvalidArgument("SummaryWriter: flush_secs must be a positive number of seconds, got " +
                          std::to_string(flush_secs));
  impl_->max_delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flush_secs));
  detail::make_dirs(log_dir, kWho);
  std::string dir = log_dir.back() == '/' ? log_dir : log_dir + "/";
  const std::string host = hostname();
  for (int attempt = 0; impl_->fd < 0; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.", static_cast<long long>(std::time(nullptr)));
    impl_->path = dir + name + host + "." + std::to_string(::getpid()) + "." + std::to_string(g_file_counter++);
    impl_->fd = detail::open_file(impl_->path, O_CREAT | O_EXCL | O_APPEND, kWho);
    if (impl_->fd < 0 && attempt == 1000) detail::throw_io_error(kWho, "create a new event file in", log_dir, EEXIST);
  }
  impl_->pending = detail::tfrecord(detail::version_event(unix_now(), "brain.Event:2"));
  impl_->flush_locked();  // the file is a valid event file from the start
  impl_->flusher = std::thread([impl = impl_.get()] { impl->run(); });
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "ddp: " << e.what() << std::endl;
  }
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  if (tag.empty()) throw InvalidArgument("SummaryWriter::add_scalar: empty tag (step " + std::to_string(step) + ")");
  if (wall_time == -1) {
    wall_time = unix_now();
  } else if (!std::isfinite(wall_time) || wall_time < 0) {
    throw InvalidArgument("SummaryWriter::add_scalar(\"" + tag + "\"): wall_time " + std::to_string(wall_time) +
                          " is not a time; pass seconds since 1970 or -1 for now");
  }
  std::string record = detail::tfrecord(detail::scalar_event(wall_time, step, tag, static_cast<float>(value)));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->error.empty()) impl_->flush_locked();  // throws the stored failure
  if (impl_->closing) throw Error("SummaryWriter::add_scalar(\"" + tag + "\"): '" + impl_->path + "' is closed");
  if (impl_->pending_records == 0) {
    impl_->oldest = Clock::now();
    impl_->wake.notify_one();
  }
  impl_->pending += record;
  if (++impl_->pending_records >= kMaxPending) impl_->flush_locked();
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->flush_locked();
}

void SummaryWriter::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closing) return;  // closed, or being closed by another thread
    impl_->closing = true;
  }
  impl_->wake.notify_all();
  if (impl_->flusher.joinable()) impl_->flusher.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  bool already_reported = impl_->error_reported;
  std::exception_ptr failure;
  try {
    impl_->flush_locked();
  } catch (const Error&) {
    if (!already_reported) failure = std::current_exception();
  }
  int fd = impl_->fd;
  impl_->fd = -1;
  try {
    detail::close_file(fd, impl_->path, kWho);
  } catch (const Error&) {
    if (!failure) failure = std::current_exception();
  }
  if (failure) std::rethrow_exception(failure);
}

const std::string& SummaryWriter::path() const { return impl_->path; }

}  // namespace ddp::train
