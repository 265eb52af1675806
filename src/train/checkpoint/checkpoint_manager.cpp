// CheckpointManager: numbered checkpoint files, a "latest" pointer, pruning, and the rank-0-writes protocol, in the
// caller's thread (save) or a background one (save_async).
#include <ATen/ATen.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include "ddp/dist/timeline.h"
#include "ddp/errors.h"
#include "ddp/train/checkpoint.h"
#include "dist/atomic_file.h"
#include "train/checkpoint/torch_format.h"

namespace ddp::train {
namespace {

namespace fs = std::filesystem;
using Numbered = std::pair<std::pair<int64_t, int64_t>, fs::path>;  // ((epoch, step), file)

const char kLatest[] = "latest";

bool parse_number(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  out = std::stoll(s);
  return true;
}

// "checkpoint-e0003-s00000042.pt" -> (3, 42)
bool parse_name(const std::string& name, std::pair<int64_t, int64_t>& out) {
  const std::string pre = "checkpoint-e", suf = ".pt";
  if (name.size() <= pre.size() + suf.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return false;
  const std::string core = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  const size_t s = core.find("-s");
  return s != std::string::npos && parse_number(core.substr(0, s), out.first) &&
         parse_number(core.substr(s + 2), out.second);
}

// Complete checkpoint files in dir, oldest first. Temporary files (".pt.tmp.<pid>") do not match.
std::vector<Numbered> list_checkpoints(const std::string& dir) {
  std::vector<Numbered> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::pair<int64_t, int64_t> n;
    std::error_code ec2;
    if (entry.is_regular_file(ec2) && entry.file_size(ec2) > 0 && parse_name(entry.path().filename().string(), n))
      out.emplace_back(n, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_save_arguments(const char* fn, int64_t epoch, int64_t step, const std::function<c10::IValue()>& make) {
  const std::string where = std::string("CheckpointManager::") + fn + ": ";
  if (epoch < 0 || step < 0)
    throw InvalidArgument(where + "epoch " + std::to_string(epoch) + " and step " + std::to_string(step) +
                          " must be >= 0");
  if (!make) throw InvalidArgument(where + "make is empty");
}

// Rank 0 tells everyone whether `error` is empty; a failure is rethrown on rank 0, PeerFailed elsewhere.
void agree_on_outcome(const GroupPtr& group, const std::exception_ptr& error, const std::string& path) {
  const int rank = group ? group->rank() : 0;
  if (group && group->size() > 1) {
    at::Tensor ok = at::full({1}, rank == 0 && !error ? 1 : 0, at::kLong);
    group->broadcast(ok);
    if (ok.item<int64_t>() != 1 && !error)
      throw PeerFailed<Error>("CheckpointManager: rank 0 failed to save " + path + " (its error is reported on rank 0)",
                              0);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

// One save being written by a thread of its own.
struct CheckpointManager::InFlight {
  std::string path;
  std::thread thread;
  std::atomic<bool> finished{false};
  std::exception_ptr error;  // set before `finished`

  std::exception_ptr join() {
    if (thread.joinable()) thread.join();
    return error;
  }
};

CheckpointManager::~CheckpointManager() {
  if (!in_flight_) return;
  if (const std::exception_ptr error = in_flight_->join()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      std::cerr << "ddp: the checkpoint " << in_flight_->path << " was not written: " << e.what() << std::endl;
    }
  }
}

GroupPtr CheckpointManager::group() const {
  return opts_.group ? opts_.group : (is_initialized() ? default_group() : nullptr);
}

CheckpointManager::CheckpointManager(CheckpointManagerOptions options) : opts_(std::move(options)) {
  if (opts_.dir.empty()) throw InvalidArgument("CheckpointManager: dir is empty; give the directory for checkpoints");
  if (opts_.keep_last < 0)
    throw InvalidArgument("CheckpointManager: keep_last " + std::to_string(opts_.keep_last) +
                          " is negative (0 keeps every checkpoint)");
}

std::string CheckpointManager::path_for(int64_t epoch, int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-e%04lld-s%08lld.pt", static_cast<long long>(epoch),
                static_cast<long long>(step));
  return (fs::path(opts_.dir) / name).string();
}

void CheckpointManager::write_and_prune(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make) {
  std::error_code ec;
  fs::create_directories(opts_.dir, ec);
  if (ec) throw Error("CheckpointManager: cannot create the directory " + opts_.dir + ": " + ec.message());
  const std::string path = path_for(epoch, step);
  save_atomic(make(), path);
  const std::string name = fs::path(path).filename().string() + "\n";
  ddp::detail::write_file_atomic((fs::path(opts_.dir) / kLatest).string(), name);
  if (opts_.keep_last == 0) return;
  // Keep the new file and the newest keep_last - 1 others (by epoch, step).
  std::vector<Numbered> others = list_checkpoints(opts_.dir);
  others.erase(std::remove_if(others.begin(), others.end(),
                              [&](const Numbered& n) { return n.second.filename() == fs::path(path).filename(); }),
               others.end());
  const size_t keep = static_cast<size_t>(opts_.keep_last) - 1;
  for (size_t i = 0; i + keep < others.size(); ++i) {
    if (!fs::remove(others[i].second, ec) && ec)
      throw Error("CheckpointManager: saved " + path + " but cannot delete the old " + others[i].second.string() +
                  ": " + ec.message());
  }
}

std::string CheckpointManager::save(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make) {
  check_save_arguments("save", epoch, step, make);
  wait();
  const GroupPtr group = this->group();
  const std::string path = path_for(epoch, step);
  std::exception_ptr error;
  if (!group || group->rank() == 0) {
    try {
      write_and_prune(epoch, step, make);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_outcome(group, error, path);  // rank 0 tells everyone whether it succeeded; then all meet at the barrier
  if (group && group->size() > 1) group->barrier();
  return path;
}

std::string CheckpointManager::save_async(int64_t epoch, int64_t step, const std::function<c10::IValue()>& make) {
  check_save_arguments("save_async", epoch, step, make);
  wait();
  const GroupPtr group = this->group();
  const std::string path = path_for(epoch, step);
  pending_ = path;
  if (group && group->rank() != 0) return path;
  auto job = std::make_unique<InFlight>();
  job->path = path;
  try {
    c10::IValue snapshot = host_snapshot(make());
    InFlight* raw = job.get();
    job->thread = std::thread([this, raw, epoch, step, snapshot = std::move(snapshot)] {
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);  // this thread only: below training
      timeline::Span span("checkpoint write", "write");
      try {
        write_and_prune(epoch, step, [&] { return snapshot; });
      } catch (...) {
        raw->error = std::current_exception();
      }
      raw->finished.store(true, std::memory_order_release);
    });
  } catch (...) {  // make() or the copy failed: reported by the next wait(), as a failed write
    job->error = std::current_exception();
    job->finished.store(true, std::memory_order_release);
  }
  in_flight_ = std::move(job);
  return path;
}

std::optional<std::string> CheckpointManager::wait() {
  if (!pending_) return std::nullopt;  // every rank knows: all of them called save_async and wait alike
  const std::string path = *pending_;
  pending_.reset();
  std::exception_ptr error;
  if (in_flight_) {  // rank 0
    error = in_flight_->join();
    in_flight_.reset();
  }
  agree_on_outcome(group(), error, path);
  return path;
}

std::string CheckpointManager::abandon() {
  pending_.reset();
  if (!in_flight_) return "";
  std::exception_ptr error = in_flight_->join();
  in_flight_.reset();
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

bool CheckpointManager::failed() const {
  return in_flight_ && in_flight_->finished.load(std::memory_order_acquire) && in_flight_->error;
}

std::vector<std::string> CheckpointManager::candidates() const {
  std::vector<std::string> out;
  if (auto newest = latest()) out.push_back(*newest);
  const auto all = list_checkpoints(opts_.dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::error_code ec;
    if (out.empty() || !fs::equivalent(it->second, out.front(), ec)) out.push_back(it->second.string());
  }
  return out;
}

std::vector<std::string> CheckpointManager::remove_stale_temporaries() const {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(opts_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    int64_t pid = 0;
    if (at == std::string::npos || !parse_number(name.substr(at + 5), pid) || pid <= 0 || pid > INT32_MAX) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its writer may still run
    std::error_code ec2;
    if (fs::remove(entry.path(), ec2)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::optional<std::string> CheckpointManager::latest() const {
  std::ifstream in(fs::path(opts_.dir) / kLatest);
  std::string name;
  if (in && std::getline(in, name)) {
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (!name.empty()) {
      fs::path p = fs::path(name).is_absolute() ? fs::path(name) : fs::path(opts_.dir) / name;
      std::error_code ec;
      if (fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0) return p.string();
    }
  }
  // No usable pointer (an older layout, or its file was deleted): the highest-numbered file.
  const auto all = list_checkpoints(opts_.dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

}  // namespace ddp::train
