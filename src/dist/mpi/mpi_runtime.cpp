#include "dist/mpi/mpi_runtime.h"

#include <stdlib.h>  // on_exit (glibc)
#include <unistd.h>  // _exit

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "ddp/dist/launch_env.h"
#include "dist/env.h"
#include "dist/heartbeat.h"
#include "dist/mpi/mpi_dtypes.h"

namespace ddp::mpi {
namespace {

// Polling interval for pending send/recv requests while nothing is queued.
constexpr auto kMinBackoff = std::chrono::microseconds(20);
constexpr auto kMaxBackoff = std::chrono::microseconds(500);
// How often the idle thread checks the deadline of an inline call.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(50);
// How long a caller waits for a just-completed task to be released before it
// gives up running inline (the call is then queued as usual).
constexpr auto kSettleWait = std::chrono::milliseconds(20);

std::mutex g_create_mu;
std::atomic<Runtime*> g_runtime{nullptr};  // leaked on purpose: used until exit

std::string thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "thread level " + std::to_string(level);
}

std::string prefix(int rank, int size, const char* op) { return ErrorContext{"mpi", rank, size, op}.prefix(); }

}  // namespace

Runtime& Runtime::get() {
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  std::lock_guard<std::mutex> lock(g_create_mu);
  if (Runtime* rt = g_runtime.load(std::memory_order_acquire)) return *rt;
  Runtime* rt = new Runtime();
  g_runtime.store(rt, std::memory_order_release);
  return *rt;
}

Runtime* Runtime::peek() { return g_runtime.load(std::memory_order_acquire); }

Runtime::Runtime() {
  detail::exit_linger_s();  // a malformed DDP_EXIT_LINGER fails here, not on the way out
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error(
        "[mpi] init: MPI was already finalized in this process and cannot be "
        "initialized again; create mpi groups before MPI_Finalize");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // DDP_HEARTBEAT_TIMEOUT=0: no heartbeat thread, and MPI without the locks MULTIPLE may take.
    const bool beat = detail::resolve_heartbeat_timeout(Milliseconds(-1)).count() > 0;
    int rc = MPI_Init_thread(nullptr, nullptr, beat ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) throw Error("[mpi] init: MPI_Init_thread failed: " + error_string(rc));
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  provided_ = provided;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::string msg = prefix(world_rank_, world_size_, "init") + "MPI provides " + thread_level_name(provided) +
                      "; the mpi backend makes its MPI calls on a helper thread and needs "
                      "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE";
    if (owns_mpi_) {
      MPI_Finalize();
      msg += " (this MPI library cannot provide it)";
    } else {
      msg += "; initialize MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)";
    }
    throw Error(msg);
  }
  int* tag_ub = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag) == MPI_SUCCESS && flag) tag_ub_ = *tag_ub;
  create_custom_ops();
  if (auto v = launch_env::choice(launch_env::kMpiInline)) inline_enabled_ = *v != "0";

  // Stop the thread when MPI_Finalize runs (attributes of MPI_COMM_SELF are
  // deleted first thing in MPI_Finalize), whoever calls it.
  int keyval = MPI_KEYVAL_INVALID;
  MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &Runtime::on_mpi_finalize, &keyval, this);
  MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
  MPI_Comm_free_keyval(&keyval);  // the attribute keeps it (and its callback) until MPI_COMM_SELF's end

  thread_ = std::thread([this] { loop(); });
  thread_id_ = thread_.get_id();
  on_exit(&Runtime::at_exit, this);
}

void Runtime::enqueue(TaskPtr task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_)
      throw CommError(task->ctx.prefix() +
                      "the mpi backend has shut down (the process is exiting or MPI_Finalize "
                      "was called)");
    if (running_ && running_->overdue(Clock::now()))
      throw CommError(task->ctx.prefix() + "the mpi backend is unusable: an earlier " + running_->ctx.op +
                      " is still blocked in MPI after its timeout of " + std::to_string(running_->timeout.count()) +
                      " ms (a rank did not call it, or failed)");
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

void Runtime::post(std::function<void()> fn) {
  auto task = std::make_shared<Task>(ErrorContext{"mpi", world_rank_, world_size_, "cleanup"}, Milliseconds(0),
                                     [fn = std::move(fn)](Task&) { fn(); });
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

bool Runtime::try_run_inline(const TaskPtr& task, bool queued) {
  if (!inline_enabled_ || !task->may_run_inline) return false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // A task that has just completed (its caller may be this thread) is still
    // being released by the thread, which may free a communicator: wait.
    settle_cv_.wait_for(lock, kSettleWait, [this] { return !(running_ && running_->done()); });
    if (stopping_ || running_ || inline_ || requests_pending_ > 0) return false;
    if (queued) {
      if (queue_.empty() || queue_.front() != task) return false;
      queue_.pop_front();
    } else if (!queue_.empty()) {
      return false;
    }
    inline_ = task.get();  // the thread now makes no MPI call until released
  }
  std::exception_ptr error;
  try {
    task->run(*task);
  } catch (...) {
    error = std::current_exception();
  }
  bool queued_meanwhile;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inline_ = nullptr;
    queued_meanwhile = !queue_.empty();
  }
  if (queued_meanwhile) work_cv_.notify_one();
  task->complete(error);
  return true;
}

void Runtime::inline_overdue(const Task& task) {
  std::fprintf(stderr,
               "%stimed out after %lld ms, blocked in MPI on the calling thread; a blocking MPI "
               "call cannot be abandoned, so this process exits with status 1 (a rank did not "
               "call %s, or failed)\n",
               task.ctx.prefix().c_str(), static_cast<long long>(task.timeout.count()), task.ctx.op.c_str());
  std::fflush(nullptr);
  _exit(1);
}

void Runtime::execute(const TaskPtr& task) {
  try {
    task->run(*task);
  } catch (...) {
    task->complete(std::current_exception());
    return;
  }
  if (task->request != MPI_REQUEST_NULL)
    active_.push_back(task);
  else
    task->complete(nullptr);
}

void Runtime::cancel_overdue(Clock::time_point now) {
  for (auto& t : active_) {
    if (!t->cancel_sent && t->overdue(now)) {
      // Receives are cancelled; OpenMPI cannot cancel most sends, which then
      // stay pending until a receiver takes them.
      MPI_Cancel(&t->request);
      t->cancel_sent = true;
    }
  }
}

bool Runtime::poll_requests() {
  bool progressed = false;
  cancel_overdue(Clock::now());
  for (size_t i = 0; i < active_.size();) {
    Task& t = *active_[i];
    int flag = 0;
    MPI_Status status;
    int rc = MPI_Test(&t.request, &flag, &status);
    if (rc == MPI_SUCCESS && !flag) {
      ++i;
      continue;
    }
    std::exception_ptr error;
    try {
      check(t.ctx, rc, "MPI_Test");
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (cancelled)  // at its deadline: the same error its waiters get
        throw TimeoutError(t.ctx.prefix() + "timed out after " + std::to_string(t.timeout.count()) + " ms");
      if (t.on_request_done) t.on_request_done(status);
    } catch (...) {
      error = std::current_exception();
    }
    t.complete(error);
    active_[i] = std::move(active_.back());
    active_.pop_back();
    progressed = true;
  }
  return progressed;
}

void Runtime::loop() {
  auto backoff = kMinBackoff;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (inline_) {  // a caller is in MPI: no MPI call here; watch its deadline
      if (inline_->overdue(Clock::now())) inline_overdue(*inline_);
      work_cv_.wait_for(lock, kWatchdogPeriod);
      continue;
    }
    if (!queue_.empty()) {
      TaskPtr task = std::move(queue_.front());
      queue_.pop_front();
      running_ = task.get();
      lock.unlock();
      // A waiter that timed out may have queued this task right after: the
      // expired receive must be cancelled before anything new can match it.
      if (!active_.empty()) cancel_overdue(Clock::now());
      execute(task);
      lock.lock();
      running_ = nullptr;
      requests_pending_ = active_.size();
      task.reset();             // may free a communicator: directly, on this thread
      settle_cv_.notify_all();  // a caller may wait to run inline
      backoff = kMinBackoff;
      continue;
    }
    if (!active_.empty()) {
      lock.unlock();
      bool progressed = poll_requests();
      lock.lock();
      requests_pending_ = active_.size();
      if (!queue_.empty()) continue;
      if (stopping_) {
        const auto now = Clock::now();
        bool all_overdue =
            std::all_of(active_.begin(), active_.end(), [&](const TaskPtr& t) { return t->overdue(now); });
        if (discard_ || all_overdue) break;
      }
      if (!active_.empty()) {
        backoff = progressed ? kMinBackoff : std::min(backoff * 2, kMaxBackoff);
        work_cv_.wait_for(lock, backoff);
        continue;
      }
    }
    if (stopping_) break;
    work_cv_.wait_for(lock, kWatchdogPeriod);
  }
  abandoned_ = active_.size();
  finished_ = true;
  idle_cv_.notify_all();
}

std::string Runtime::stop(bool drain, Milliseconds grace) {
  std::deque<TaskPtr> dropped;
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return "";
  stopping_ = true;
  if (!drain) {
    discard_ = true;
    dropped.swap(queue_);
  }
  work_cv_.notify_all();
  lock.unlock();
  for (auto& t : dropped)
    t->complete(std::make_exception_ptr(CommError(t->ctx.prefix() + "the mpi backend shut down before this ran")));
  lock.lock();
  const auto give_up = Clock::now() + grace;
  while (!finished_) {
    const auto now = Clock::now();
    const Task* busy = running_ ? running_ : inline_;
    if (busy && (drain ? busy->overdue(now) : now > give_up))
      return busy->ctx.op + " is still blocked in MPI" +
             (drain ? " after its timeout of " + std::to_string(busy->timeout.count()) + " ms" : std::string());
    idle_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  lock.unlock();
  thread_.join();
  if (abandoned_ > 0) return std::to_string(abandoned_) + " send/recv request(s) never completed";
  return "";
}

void Runtime::at_exit(int status, void* arg) {
  auto* rt = static_cast<Runtime*>(arg);
  std::fflush(stdout);
  std::fflush(stderr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the application called MPI_Finalize; the thread is stopped
  std::string where = prefix(rt->world_rank_, rt->world_size_, "exit");
  if (status != 0 && rt->world_size_ > 1) {
    // Failing rank: MPI_Finalize would wait for peers that may be blocked in
    // a collective waiting for this rank. Exit with the status instead;
    // mpirun (or srun --kill-on-bad-exit) then ends the whole job, at once
    // under ddprun: first give peers failing alike DDP_EXIT_LINGER.
    detail::linger_before_failed_exit();
    if (!rt->stop(/*drain=*/false, Milliseconds(200)).empty()) {
      std::fflush(nullptr);
      _exit(status);
    }
    return;
  }
  std::string stuck = rt->stop(/*drain=*/true, Milliseconds(0));
  if (!stuck.empty()) {
    std::fprintf(stderr, "%s%s; exiting with status 1 without MPI_Finalize\n", where.c_str(), stuck.c_str());
    std::fflush(nullptr);
    _exit(1);
  }
  if (rt->owns_mpi_) MPI_Finalize();
}

void Runtime::adopt_comm(MPI_Comm c) {
  std::lock_guard<std::mutex> lock(comms_mu_);
  comms_.push_back(c);
}

bool Runtime::release_comm(MPI_Comm c) {
  std::lock_guard<std::mutex> lock(comms_mu_);
  auto it = std::find(comms_.begin(), comms_.end(), c);
  if (it == comms_.end()) return false;
  comms_.erase(it);
  return true;
}

void Runtime::before_finalize(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(comms_mu_);
  finalize_hooks_.push_back(std::move(fn));
}

int Runtime::on_mpi_finalize(MPI_Comm, int, void*, void* extra) {
  auto* rt = static_cast<Runtime*>(extra);
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(rt->comms_mu_);
    hooks.swap(rt->finalize_hooks_);
  }
  for (auto& fn : hooks) fn();  // the heartbeat's channel: its requests end before its communicator
  std::string stuck = rt->stop(/*drain=*/true, Milliseconds(0));
  {
    // MPI is still usable while MPI_COMM_SELF's attributes are deleted; the thread has stopped.
    std::lock_guard<std::mutex> lock(rt->comms_mu_);
    for (MPI_Comm c : rt->comms_) MPI_Comm_free(&c);
    rt->comms_.clear();
  }
  if (!stuck.empty()) {
    std::fprintf(stderr, "%s%s while MPI_Finalize runs\n", prefix(rt->world_rank_, rt->world_size_, "finalize").c_str(),
                 stuck.c_str());
    std::fflush(stderr);
  }
  return MPI_SUCCESS;
}

}  // namespace ddp::mpi
