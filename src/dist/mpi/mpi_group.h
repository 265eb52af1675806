// The mpi backend's collectives: one MPI communicator (a duplicate of
// MPI_COMM_WORLD, or a split of a parent's) used only on the communication
// thread, or inline on a waiting caller's (see Runtime). Each call queues a
// task and returns its Work.
#pragma once
#include "dist/mpi/mpi_c.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/backend_impl.h"
#include "dist/mpi/mpi_runtime.h"

namespace ddp::mpi {

// An MPI communicator owned by backends and their tasks; freed on the
// communication thread when the last owner lets go (not after shutdown).
class Comm {
 public:
  explicit Comm(MPI_Comm c) : handle(c) {}
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  const MPI_Comm handle;
};
using CommPtr = std::shared_ptr<Comm>;

class MpiBackend final : public detail::Backend {
 public:
  using Call = detail::Call;
  // beat_comm: the heartbeat's communicator (default groups with peers), else null.
  MpiBackend(Runtime& rt, CommPtr comm, int rank, int size, CommPtr beat_comm = nullptr);

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool has_avg() const override { return true; }  // divides right after MPI returns, on the same thread
  bool has_reduce_scatter() const override { return true; }
  int max_tag() const override { return rt_.tag_ub(); }

  Work broadcast(at::Tensor& buf, int root, const Call& c) override;
  Work all_reduce(at::Tensor& buf, ReduceOp op, const Call& c) override;
  Work reduce(at::Tensor& buf, ReduceOp op, int root, const Call& c) override;
  Work all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) override;
  Work gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override;
  Work scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) override;
  Work reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp op, const Call& c) override;
  Work all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                  const std::vector<int64_t>& in_counts, const Call& c) override;
  Work barrier(const Call& c) override;
  Work send(const at::Tensor& buf, int dst, int tag, const Call& c) override;
  Work recv(at::Tensor& buf, int src, int tag, const Call& c) override;
  std::unique_ptr<Backend> split(const std::vector<int>& ranks, int index, Milliseconds timeout) override;
  std::unique_ptr<detail::BeatChannel> beat_channel() override;

 private:
  // Queues `body` for the communication thread, or runs it inline (see
  // Runtime) when `blocking` (a collective, not a request) and not async.
  Work submit(const Call& c, std::function<void(Task&)> body, bool blocking = true);

  Runtime& rt_;
  CommPtr comm_;
  int rank_;
  int size_;
  CommPtr beat_comm_;
};

// Runs `body` on the communication thread and waits up to `timeout`
// (<= 0: no limit). For setting up communicators.
void run_and_wait(Runtime& rt, ErrorContext c, Milliseconds timeout, std::function<void(Task&)> body);

}  // namespace ddp::mpi
