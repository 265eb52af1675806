// The ProcessGroup of the mpi backend: one MPI communicator (a duplicate of
// MPI_COMM_WORLD, or a split of a parent's) used only on the communication
// thread. Every call validates its arguments on the caller's thread, queues a
// task and returns its Work.
#pragma once
#include "dist/mpi/mpi_c.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "dist/mpi/mpi_runtime.h"

namespace ddp::mpi {

// An MPI communicator owned by groups and their tasks; freed on the
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

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(Runtime& rt, CommPtr comm, int rank, int size, Milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  Milliseconds timeout() const override { return timeout_; }

  Work broadcast(at::Tensor& tensor, const BroadcastOptions& opts) override;
  Work all_reduce(at::Tensor& tensor, const AllReduceOptions& opts) override;
  Work all_reduce_coalesced(std::vector<at::Tensor>& tensors,
                            const AllReduceOptions& opts) override;
  Work reduce(at::Tensor& tensor, const ReduceOptions& opts) override;
  Work all_gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                  const CollectiveOptions& opts) override;
  Work gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
              const RootOptions& opts) override;
  Work scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
               const RootOptions& opts) override;
  Work reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                      const ReduceScatterOptions& opts) override;
  Work all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                  const CollectiveOptions& opts) override;
  Work barrier(const CollectiveOptions& opts) override;
  Work send(const at::Tensor& tensor, int dst, const P2POptions& opts) override;
  Work recv(at::Tensor& tensor, int src, const P2POptions& opts) override;
  GroupPtr new_group(const std::vector<int>& ranks) override;

 private:
  ErrorContext ctx(const char* op) const { return {"mpi", rank_, size_, op}; }
  // Queues `body` for the communication thread, or runs it inline (see
  // Runtime) when `blocking` (a collective, not a request) and not async;
  // waits for it unless async.
  Work submit(ErrorContext c, const CollectiveOptions& opts, std::function<void(Task&)> body,
              bool blocking = true);
  void check_tag(const ErrorContext& c, int tag) const;

  Runtime& rt_;
  CommPtr comm_;
  int rank_;
  int size_;
  Milliseconds timeout_;
};

// Runs `body` on the communication thread and waits up to `timeout`
// (<= 0: no limit). For setting up communicators.
void run_and_wait(Runtime& rt, ErrorContext c, Milliseconds timeout,
                  std::function<void(Task&)> body);

}  // namespace ddp::mpi
