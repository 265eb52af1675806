// The process-wide MPI runtime of the mpi backend: initializes MPI once, owns
// the one communication thread that makes every MPI call, and shuts both down
// at process exit.
//
// The thread runs tasks from a FIFO queue. Blocking tasks (collectives) run to
// completion in order; request tasks (send/recv) are started in order and then
// polled alongside, so a pending recv never blocks the collectives queued
// after it and can be cancelled when its waiter times out.
//
// Exit (glibc on_exit, so the exit status is known):
//   status 0: drain the queue (each task bounded by its timeout), join the
//             thread, MPI_Finalize when ddp initialized MPI. If an operation
//             is stuck in MPI past its timeout: message on stderr, _exit(1).
//   status != 0 with peers: no MPI_Finalize (it synchronizes with every rank,
//             and peers may be blocked waiting for this one); the process
//             exits with its status and mpirun/srun end the job.
// When the application initialized MPI itself, the thread is stopped from an
// MPI_COMM_SELF attribute callback at the start of its MPI_Finalize.
//
// Inline execution: handing a call to the thread and waking the caller again
// costs tens of microseconds, a third of a 1 MiB all_gather. So a blocking
// collective whose caller would only wait runs on the caller's own thread
// when the runtime is idle (nothing queued, running or pending): when it is
// called without async_op, or when its Work is waited on while it is still
// first in the queue. The thread then keeps the deadline: an inline call
// still blocked in MPI past its timeout cannot be abandoned, so the process
// prints which operation timed out and exits with status 1 (mpirun then ends
// the job) instead of hanging. DDP_MPI_INLINE=0 turns inline execution off.
#pragma once
#include "dist/mpi/mpi_c.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/mpi/mpi_task.h"

namespace ddp::mpi {

class Runtime {
 public:
  // Initializes MPI and starts the thread on first use. MPI_THREAD_MULTIPLE is asked for, so that the
  // heartbeat's thread can beat beside the communication thread (mpi_beat.h), unless DDP_HEARTBEAT_TIMEOUT
  // is 0 (then MPI_THREAD_SERIALIZED). Throws ddp::Error when MPI cannot be used from a helper thread.
  static Runtime& get();
  // The runtime if get() succeeded before, else null.
  static Runtime* peek();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int tag_ub() const { return tag_ub_; }
  // MPI_THREAD_MULTIPLE was provided: threads other than the communication thread may call MPI.
  bool concurrent() const { return provided_ >= MPI_THREAD_MULTIPLE; }
  // Runs `fn` first thing when MPI_Finalize runs (whoever calls it), before the communicators are freed.
  void before_finalize(std::function<void()> fn);

  // Queues a task. Throws CommError when the runtime has shut down or an
  // earlier blocking operation is stuck past its timeout.
  void enqueue(TaskPtr task);
  // Runs a blocking task (task->may_run_inline) on the calling thread if the
  // runtime is idle and, when `queued`, the task is first in the queue (it is
  // taken out). False when it must go through the thread instead.
  bool try_run_inline(const TaskPtr& task, bool queued);
  // Runs fn on the communication thread at some point (errors ignored); a
  // no-op once shut down. For releasing MPI objects.
  void post(std::function<void()> fn);
  bool on_comm_thread() const { return std::this_thread::get_id() == thread_id_; }
  // The communicators of live groups: MPI_Finalize does not free them, so the runtime frees those still
  // registered when MPI_Finalize runs (a group destroyed after it, e.g. at exit, then has nothing to free).
  void adopt_comm(MPI_Comm c);
  // Unregisters `c`; false when it was not registered (already freed at MPI_Finalize): do not free it.
  bool release_comm(MPI_Comm c);

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  Runtime();
  void loop();
  // Runs one task from the queue; request tasks are added to active_.
  void execute(const TaskPtr& task);
  // Cancels the active requests past their deadline (receives can be).
  void cancel_overdue(Clock::time_point now);
  // Tests active requests; true when any completed.
  bool poll_requests();
  // Stops the thread. drain: runs what is queued first and waits for pending
  // requests, each up to its deadline; else fails queued tasks and waits at
  // most `grace`. Returns "" when the thread stopped with nothing pending in
  // MPI, else what is still stuck.
  std::string stop(bool drain, Milliseconds grace);
  // The deadline of the inline call, checked by the thread while it is idle.
  [[noreturn]] void inline_overdue(const Task& task);
  static void at_exit(int status, void* arg);
  static int on_mpi_finalize(MPI_Comm comm, int keyval, void* value, void* extra);

  int world_rank_ = 0;
  int world_size_ = 1;
  int tag_ub_ = 32767;
  bool owns_mpi_ = false;  // ddp called MPI_Init_thread
  int provided_ = 0;       // MPI's thread level

  std::mutex comms_mu_;
  std::vector<MPI_Comm> comms_;                        // guarded by comms_mu_
  std::vector<std::function<void()>> finalize_hooks_;  // guarded by comms_mu_
  mutable std::mutex mu_;
  std::condition_variable work_cv_;    // the thread waits for tasks
  std::condition_variable idle_cv_;    // stop() waits for the thread
  std::condition_variable settle_cv_;  // try_run_inline waits for running_ to clear
  std::deque<TaskPtr> queue_;
  Task* running_ = nullptr;      // the task the thread runs now (guarded by mu_)
  Task* inline_ = nullptr;       // the task a caller runs inline now (guarded by mu_)
  size_t requests_pending_ = 0;  // active_.size() while running_ is null (guarded by mu_)
  bool inline_enabled_ = true;   // DDP_MPI_INLINE is not 0
  bool stopping_ = false;        // no new tasks; the thread drains and exits
  bool discard_ = false;         // stop without draining
  bool finished_ = false;        // the thread left its loop
  size_t abandoned_ = 0;         // requests still pending when it left
  std::vector<TaskPtr> active_;  // started requests (communication thread only)
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace ddp::mpi
