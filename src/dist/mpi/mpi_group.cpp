// MpiGroup: the single-tensor collectives, barrier, send/recv and new_group.
// The list collectives (gather, scatter, ...) are in mpi_group_lists.cpp.
#include "dist/mpi/mpi_group.h"

#include <ATen/ATen.h>

#include <sstream>

#include "dist/coalesce.h"
#include "dist/mpi/mpi_dtypes.h"
#include "dist/validate.h"

namespace ddp::mpi {

MpiGroup::MpiGroup(Runtime& rt, CommPtr comm, int rank, int size, Milliseconds timeout)
    : rt_(rt), comm_(std::move(comm)), rank_(rank), size_(size), timeout_(timeout) {}

Work MpiGroup::submit(ErrorContext c, const CollectiveOptions& opts,
                      std::function<void(Task&)> body, bool blocking) {
  auto task = std::make_shared<Task>(std::move(c), detail::effective_timeout(opts.timeout, timeout_),
                                     std::move(body));
  task->may_run_inline = blocking;
  // A caller that would only wait runs the collective itself when it can.
  if (opts.async_op || !rt_.try_run_inline(task, /*queued=*/false)) rt_.enqueue(task);
  return finish(Work(std::make_shared<TaskWork>(std::move(task), &rt_)), opts, timeout_);
}

void MpiGroup::check_tag(const ErrorContext& c, int tag) const {
  if (tag < 0 || tag > rt_.tag_ub())
    throw_invalid(c, "tag " + std::to_string(tag) + " is out of range [0, " +
                         std::to_string(rt_.tag_ub()) + "]");
}

Work MpiGroup::broadcast(at::Tensor& t, const BroadcastOptions& o) {
  auto c = ctx("broadcast");
  detail::check_tensor(c, t, "tensor");
  detail::check_rank(c, o.root, "root");
  int n = to_count(c, t.numel(), "tensor");
  return submit(std::move(c), o, [t, n, root = o.root, comm = comm_](Task& task) {
    check(task.ctx, MPI_Bcast(t.data_ptr(), n, datatype_of(t.scalar_type()), root, comm->handle),
          "MPI_Bcast");
  });
}

Work MpiGroup::all_reduce(at::Tensor& t, const AllReduceOptions& o) {
  auto c = ctx("all_reduce");
  detail::check_tensor(c, t, "tensor");
  detail::check_op(c, o.op, t.scalar_type());
  int n = to_count(c, t.numel(), "tensor");
  MPI_Op op = op_of(o.op, t.scalar_type());
  int divisor = (o.op == ReduceOp::AVG && size_ > 1) ? size_ : 0;
  // In place on the caller's memory: no copy, whatever the dtype.
  return submit(std::move(c), o, [t, n, op, divisor, comm = comm_](Task& task) mutable {
    check(task.ctx,
          MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), n, datatype_of(t.scalar_type()), op,
                        comm->handle),
          "MPI_Allreduce");
    if (divisor) t.div_(divisor);
  });
}

Work MpiGroup::all_reduce_coalesced(std::vector<at::Tensor>& ts, const AllReduceOptions& o) {
  // Validates every tensor (naming tensors[i]) before queuing anything.
  return detail::all_reduce_coalesced_flat(*this, ts, o);
}

Work MpiGroup::reduce(at::Tensor& t, const ReduceOptions& o) {
  auto c = ctx("reduce");
  detail::check_tensor(c, t, "tensor");
  detail::check_op(c, o.op, t.scalar_type());
  detail::check_rank(c, o.root, "root");
  int n = to_count(c, t.numel(), "tensor");
  MPI_Op op = op_of(o.op, t.scalar_type());
  bool at_root = rank_ == o.root;
  int divisor = (o.op == ReduceOp::AVG && size_ > 1 && at_root) ? size_ : 0;
  return submit(std::move(c), o,
                [t, n, op, divisor, at_root, root = o.root, comm = comm_](Task& task) mutable {
                  MPI_Datatype dt = datatype_of(t.scalar_type());
                  int rc = at_root ? MPI_Reduce(MPI_IN_PLACE, t.data_ptr(), n, dt, op, root,
                                                comm->handle)
                                   : MPI_Reduce(t.data_ptr(), nullptr, n, dt, op, root,
                                                comm->handle);
                  check(task.ctx, rc, "MPI_Reduce");
                  if (divisor) t.div_(divisor);
                });
}

Work MpiGroup::barrier(const CollectiveOptions& o) {
  return submit(ctx("barrier"), o, [comm = comm_](Task& task) {
    check(task.ctx, MPI_Barrier(comm->handle), "MPI_Barrier");
  });
}

Work MpiGroup::send(const at::Tensor& t, int dst, const P2POptions& o) {
  auto c = ctx("send");
  detail::check_tensor(c, t, "tensor");
  detail::check_rank(c, dst, "dst");
  check_tag(c, o.tag);
  if (dst == rank_)
    throw_invalid(c, "dst " + std::to_string(dst) + " is this rank; send to another rank");
  int n = to_count(c, t.numel(), "tensor");
  return submit(std::move(c), o, [t, n, dst, tag = o.tag, comm = comm_](Task& task) {
    check(task.ctx,
          MPI_Isend(t.data_ptr(), n, datatype_of(t.scalar_type()), dst, tag, comm->handle,
                    &task.request),
          "MPI_Isend");
    task.on_request_done = [](const MPI_Status&) {};
  }, /*blocking=*/false);
}

Work MpiGroup::recv(at::Tensor& t, int src, const P2POptions& o) {
  auto c = ctx("recv");
  detail::check_tensor(c, t, "tensor");
  detail::check_rank(c, src, "src");
  check_tag(c, o.tag);
  if (src == rank_)
    throw_invalid(c, "src " + std::to_string(src) + " is this rank; receive from another rank");
  int n = to_count(c, t.numel(), "tensor");
  return submit(std::move(c), o, [t, n, src, tag = o.tag, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(t.scalar_type());
    check(task.ctx, MPI_Irecv(t.data_ptr(), n, dt, src, tag, comm->handle, &task.request),
          "MPI_Irecv");
    task.on_request_done = [&task, n, dt, src](const MPI_Status& status) {
      int got = 0;
      MPI_Get_count(&status, dt, &got);
      if (got != n)
        throw CommError(task.ctx.prefix() + "received " + std::to_string(got) +
                        " elements from src " + std::to_string(src) + " but the tensor has " +
                        std::to_string(n) + "; send and recv sizes must match");
    };
  }, /*blocking=*/false);
}

GroupPtr MpiGroup::new_group(const std::vector<int>& ranks) {
  auto c = ctx("new_group");
  if (ranks.empty()) throw_invalid(c, "ranks is empty; a group needs at least one rank");
  int my_index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    detail::check_rank(c, ranks[i], "ranks[" + std::to_string(i) + "]");
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      std::ostringstream s;
      s << "ranks must be sorted and unique; got [";
      for (size_t j = 0; j < ranks.size(); ++j) s << (j ? ", " : "") << ranks[j];
      s << "]";
      throw_invalid(c, s.str());
    }
    if (ranks[i] == rank_) my_index = static_cast<int>(i);
  }
  auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  // Collective over this group: non-members take part with MPI_UNDEFINED.
  run_and_wait(rt_, c, timeout_,
               [comm = comm_, member = my_index >= 0, key = rank_, result](Task& task) {
                 MPI_Comm out = MPI_COMM_NULL;
                 check(task.ctx,
                       MPI_Comm_split(comm->handle, member ? 0 : MPI_UNDEFINED, key, &out),
                       "MPI_Comm_split");
                 if (out != MPI_COMM_NULL) {
                   int rc = MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
                   if (rc != MPI_SUCCESS) MPI_Comm_free(&out);
                   check(task.ctx, rc, "MPI_Comm_set_errhandler");
                 }
                 *result = out;
               });
  if (my_index < 0) return nullptr;
  return std::make_shared<MpiGroup>(rt_, std::make_shared<Comm>(*result), my_index,
                                    static_cast<int>(ranks.size()), timeout_);
}

void run_and_wait(Runtime& rt, ErrorContext c, Milliseconds timeout,
                  std::function<void(Task&)> body) {
  auto task = std::make_shared<Task>(std::move(c), timeout, std::move(body));
  rt.enqueue(task);
  task->wait(timeout.count() > 0 ? timeout : kNoTimeout);
}

}  // namespace ddp::mpi
