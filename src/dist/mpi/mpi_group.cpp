// MpiBackend: each collective as one MPI call on flat buffers, run as a task.
#include "dist/mpi/mpi_group.h"

#include <ATen/ATen.h>

#include "dist/mpi/mpi_dtypes.h"

namespace ddp::mpi {

MpiBackend::MpiBackend(Runtime& rt, CommPtr comm, int rank, int size, CommPtr beat_comm)
    : rt_(rt), comm_(std::move(comm)), rank_(rank), size_(size), beat_comm_(std::move(beat_comm)) {}

Work MpiBackend::submit(const Call& c, std::function<void(Task&)> body, bool blocking) {
  auto task = std::make_shared<Task>(c.ctx, c.timeout, std::move(body));
  task->may_run_inline = blocking;
  // A caller that would only wait runs the collective itself when it can.
  if (c.async || !rt_.try_run_inline(task, /*queued=*/false)) rt_.enqueue(task);
  return Work(std::make_shared<TaskWork>(std::move(task), &rt_));
}

Work MpiBackend::broadcast(at::Tensor& t, int root, const Call& c) {
  int n = to_count(c.ctx, t.numel(), "tensor");
  return submit(c, [t, n, root, comm = comm_](Task& task) {
    check(task.ctx, MPI_Bcast(t.data_ptr(), n, datatype_of(t.scalar_type()), root, comm->handle), "MPI_Bcast");
  });
}

Work MpiBackend::all_reduce(at::Tensor& t, ReduceOp o, const Call& c) {
  int n = to_count(c.ctx, t.numel(), "tensor");
  MPI_Op op = op_of(o, t.scalar_type());
  int divisor = (o == ReduceOp::AVG && size_ > 1) ? size_ : 0;
  // In place on the caller's memory: no copy, whatever the dtype.
  return submit(c, [t, n, op, divisor, comm = comm_](Task& task) mutable {
    check(task.ctx, MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), n, datatype_of(t.scalar_type()), op, comm->handle),
          "MPI_Allreduce");
    if (divisor) t.div_(divisor);
  });
}

Work MpiBackend::reduce(at::Tensor& t, ReduceOp o, int root, const Call& c) {
  int n = to_count(c.ctx, t.numel(), "tensor");
  MPI_Op op = op_of(o, t.scalar_type());
  bool at_root = rank_ == root;
  int divisor = (o == ReduceOp::AVG && size_ > 1 && at_root) ? size_ : 0;
  return submit(c, [t, n, op, divisor, at_root, root, comm = comm_](Task& task) mutable {
    MPI_Datatype dt = datatype_of(t.scalar_type());
    int rc = at_root ? MPI_Reduce(MPI_IN_PLACE, t.data_ptr(), n, dt, op, root, comm->handle)
                     : MPI_Reduce(t.data_ptr(), nullptr, n, dt, op, root, comm->handle);
    check(task.ctx, rc, "MPI_Reduce");
    if (divisor) t.div_(divisor);
  });
}

Work MpiBackend::all_gather(at::Tensor& out, const at::Tensor& in, const Call& c) {
  int n = to_count(c.ctx, in.numel(), "input");
  to_count(c.ctx, out.numel(), "outputs (all together)");
  return submit(c, [out, in, n, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(in.scalar_type());
    check(task.ctx, MPI_Allgather(in.data_ptr(), n, dt, out.data_ptr(), n, dt, comm->handle), "MPI_Allgather");
  });
}

Work MpiBackend::gather(at::Tensor& out, const at::Tensor& in, int root, const Call& c) {
  int n = to_count(c.ctx, in.numel(), "input");
  return submit(c, [out, in, n, root, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(in.scalar_type());
    void* recv = out.defined() ? out.data_ptr() : nullptr;  // root only
    check(task.ctx, MPI_Gather(in.data_ptr(), n, dt, recv, n, dt, root, comm->handle), "MPI_Gather");
  });
}

Work MpiBackend::scatter(at::Tensor& out, const at::Tensor& in, int root, const Call& c) {
  int n = to_count(c.ctx, out.numel(), "output");
  return submit(c, [out, in, n, root, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(out.scalar_type());
    void* send = in.defined() ? in.data_ptr() : nullptr;  // root only
    check(task.ctx, MPI_Scatter(send, n, dt, out.data_ptr(), n, dt, root, comm->handle), "MPI_Scatter");
  });
}

Work MpiBackend::reduce_scatter(at::Tensor& out, const at::Tensor& in, ReduceOp o, const Call& c) {
  int n = to_count(c.ctx, out.numel(), "output");
  MPI_Op op = op_of(o, out.scalar_type());
  int divisor = (o == ReduceOp::AVG && size_ > 1) ? size_ : 0;
  return submit(c, [in, out, n, op, divisor, comm = comm_](Task& task) mutable {
    check(task.ctx,
          MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), n, datatype_of(out.scalar_type()), op, comm->handle),
          "MPI_Reduce_scatter_block");
    if (divisor) out.div_(divisor);
  });
}

Work MpiBackend::all_to_all(at::Tensor& out, const std::vector<int64_t>& out_counts, const at::Tensor& in,
                            const std::vector<int64_t>& in_counts, const Call& c) {
  // Per-pair sizes may differ: counts and displacements in elements.
  std::vector<int> scounts(size_), sdispls(size_), rcounts(size_), rdispls(size_);
  int64_t stotal = 0, rtotal = 0;
  for (int r = 0; r < size_; ++r) {
    scounts[r] = to_count(c.ctx, in_counts[r], "inputs[" + std::to_string(r) + "]");
    rcounts[r] = to_count(c.ctx, out_counts[r], "outputs[" + std::to_string(r) + "]");
    sdispls[r] = static_cast<int>(stotal);
    rdispls[r] = static_cast<int>(rtotal);
    stotal += scounts[r];
    rtotal += rcounts[r];
    to_count(c.ctx, stotal, "inputs (all together)");
    to_count(c.ctx, rtotal, "outputs (all together)");
  }
  return submit(c, [out, in, scounts, sdispls, rcounts, rdispls, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(in.scalar_type());
    check(task.ctx,
          MPI_Alltoallv(in.data_ptr(), scounts.data(), sdispls.data(), dt, out.data_ptr(), rcounts.data(),
                        rdispls.data(), dt, comm->handle),
          "MPI_Alltoallv");
  });
}

Work MpiBackend::barrier(const Call& c) {
  return submit(c, [comm = comm_](Task& task) { check(task.ctx, MPI_Barrier(comm->handle), "MPI_Barrier"); });
}

Work MpiBackend::send(const at::Tensor& t, int dst, int tag, const Call& c) {
  int n = to_count(c.ctx, t.numel(), "tensor");
  return submit(
      c,
      [t, n, dst, tag, comm = comm_](Task& task) {
        check(task.ctx, MPI_Isend(t.data_ptr(), n, datatype_of(t.scalar_type()), dst, tag, comm->handle, &task.request),
              "MPI_Isend");
        task.on_request_done = [](const MPI_Status&) {};
      },
      /*blocking=*/false);
}

Work MpiBackend::recv(at::Tensor& t, int src, int tag, const Call& c) {
  int n = to_count(c.ctx, t.numel(), "tensor");
  return submit(
      c,
      [t, n, src, tag, comm = comm_](Task& task) {
        MPI_Datatype dt = datatype_of(t.scalar_type());
        check(task.ctx, MPI_Irecv(t.data_ptr(), n, dt, src, tag, comm->handle, &task.request), "MPI_Irecv");
        task.on_request_done = [&task, n, dt, src](const MPI_Status& status) {
          int got = 0;
          MPI_Get_count(&status, dt, &got);
          if (got != n)
            throw CommError(task.ctx.prefix() + "received " + std::to_string(got) + " elements from src " +
                            std::to_string(src) + " but the tensor has " + std::to_string(n) +
                            "; send and recv sizes must match");
        };
      },
      /*blocking=*/false);
}

std::unique_ptr<detail::Backend> MpiBackend::split(const std::vector<int>& ranks, int index, Milliseconds timeout) {
  ErrorContext c{"mpi", rank_, size_, "new_group"};
  auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  // Collective over this communicator: non-members take part with MPI_UNDEFINED.
  run_and_wait(rt_, c, timeout, [comm = comm_, member = index >= 0, key = rank_, result](Task& task) {
    MPI_Comm out = MPI_COMM_NULL;
    check(task.ctx, MPI_Comm_split(comm->handle, member ? 0 : MPI_UNDEFINED, key, &out), "MPI_Comm_split");
    if (out != MPI_COMM_NULL) {
      int rc = MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
      if (rc != MPI_SUCCESS) MPI_Comm_free(&out);
      check(task.ctx, rc, "MPI_Comm_set_errhandler");
    }
    *result = out;
  });
  if (index < 0) return nullptr;
  rt_.adopt_comm(*result);
  return std::make_unique<MpiBackend>(rt_, std::make_shared<Comm>(*result), index, static_cast<int>(ranks.size()));
}

void run_and_wait(Runtime& rt, ErrorContext c, Milliseconds timeout, std::function<void(Task&)> body) {
  auto task = std::make_shared<Task>(std::move(c), timeout, std::move(body));
  rt.enqueue(task);
  task->wait(timeout.count() > 0 ? timeout : kNoTimeout);
}

}  // namespace ddp::mpi
