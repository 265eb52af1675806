// MpiGroup: the collectives over lists of tensors (all_gather, gather,
// scatter, reduce_scatter, all_to_all). MPI wants one buffer per side: when the
// caller's tensors already lie back to back in memory (e.g. chunks of one
// tensor) MPI uses them directly, else they are packed into / unpacked from a
// temporary flat tensor on the communication thread.
#include <ATen/ATen.h>

#include "dist/mpi/mpi_dtypes.h"
#include "dist/mpi/mpi_group.h"
#include "dist/validate.h"

namespace ddp::mpi {
namespace {

using Tensors = std::vector<at::Tensor>;

char* bytes(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// The list's tensors lie back to back in memory, in order.
bool is_packed(const Tensors& list) {
  if (list.empty()) return true;
  char* next = bytes(list[0]);
  for (const auto& t : list) {
    if (t.nbytes() > 0 && bytes(t) != next) return false;
    next += t.nbytes();
  }
  return true;
}

size_t total_bytes(const Tensors& list) {
  size_t n = 0;
  for (const auto& t : list) n += t.nbytes();
  return n;
}

bool overlaps(const char* a, size_t a_len, const char* b, size_t b_len) {
  return a_len > 0 && b_len > 0 && a < b + b_len && b < a + a_len;
}

// The list as one flat buffer: its own memory when packed and not
// overlapping [avoid, avoid + avoid_len), else a copy.
at::Tensor flat_input(const Tensors& list, const char* avoid = nullptr, size_t avoid_len = 0) {
  if (is_packed(list) && !overlaps(bytes(list[0]), total_bytes(list), avoid, avoid_len))
    return at::Tensor();  // undefined: use list[0].data_ptr()
  Tensors views;
  views.reserve(list.size());
  for (const auto& t : list) views.push_back(t.reshape({-1}));
  return at::cat(views);
}

// Where MPI writes the list's data: the list's memory when packed and not
// overlapping the input, else a temporary copied out by unpack().
at::Tensor flat_output(const Tensors& list, const char* avoid, size_t avoid_len) {
  size_t len = total_bytes(list);
  if (is_packed(list) && !overlaps(bytes(list[0]), len, avoid, avoid_len)) return at::Tensor();
  int64_t numel = 0;
  for (const auto& t : list) numel += t.numel();
  return at::empty({numel}, list[0].options());
}

void* data_of(const at::Tensor& flat, const Tensors& list) {
  return flat.defined() ? flat.data_ptr() : list[0].data_ptr();
}

void unpack(const at::Tensor& flat, Tensors& list) {
  if (!flat.defined()) return;
  int64_t offset = 0;
  for (auto& t : list) {
    int64_t n = t.numel();
    t.view({-1}).copy_(flat.narrow(0, offset, n));
    offset += n;
  }
}

}  // namespace

Work MpiGroup::all_gather(Tensors& outs, const at::Tensor& in, const CollectiveOptions& o) {
  auto c = ctx("all_gather");
  detail::check_tensor(c, in, "input");
  detail::check_list(c, outs, "outputs", size_, in, "input");
  int n = to_count(c, in.numel(), "input");
  return submit(std::move(c), o, [outs, in, n, comm = comm_](Task& task) mutable {
    MPI_Datatype dt = datatype_of(in.scalar_type());
    at::Tensor tmp = flat_output(outs, bytes(in), in.nbytes());
    check(task.ctx, MPI_Allgather(in.data_ptr(), n, dt, data_of(tmp, outs), n, dt, comm->handle),
          "MPI_Allgather");
    unpack(tmp, outs);
  });
}

Work MpiGroup::gather(Tensors& outs, const at::Tensor& in, const RootOptions& o) {
  auto c = ctx("gather");
  detail::check_tensor(c, in, "input");
  detail::check_rank(c, o.root, "root");
  bool at_root = rank_ == o.root;
  // Only the root's outputs are used; other ranks pass {} (anything is ignored).
  if (at_root) detail::check_list(c, outs, "outputs", size_, in, "input");
  int n = to_count(c, in.numel(), "input");
  Tensors targets = at_root ? outs : Tensors{};
  return submit(std::move(c), o,
                [targets, in, n, at_root, root = o.root, comm = comm_](Task& task) mutable {
                  MPI_Datatype dt = datatype_of(in.scalar_type());
                  at::Tensor tmp;
                  void* recv = nullptr;
                  if (at_root) {
                    tmp = flat_output(targets, bytes(in), in.nbytes());
                    recv = data_of(tmp, targets);
                  }
                  check(task.ctx,
                        MPI_Gather(in.data_ptr(), n, dt, recv, n, dt, root, comm->handle),
                        "MPI_Gather");
                  if (at_root) unpack(tmp, targets);
                });
}

Work MpiGroup::scatter(at::Tensor& out, const Tensors& ins, const RootOptions& o) {
  auto c = ctx("scatter");
  detail::check_tensor(c, out, "output");
  detail::check_rank(c, o.root, "root");
  bool at_root = rank_ == o.root;
  // Only the root's inputs are used; other ranks pass {} (anything is ignored).
  if (at_root) detail::check_list(c, ins, "inputs", size_, out, "output");
  int n = to_count(c, out.numel(), "output");
  Tensors sources = at_root ? ins : Tensors{};
  return submit(std::move(c), o,
                [sources, out, n, at_root, root = o.root, comm = comm_](Task& task) {
                  MPI_Datatype dt = datatype_of(out.scalar_type());
                  at::Tensor flat;
                  void* send = nullptr;
                  if (at_root) {
                    flat = flat_input(sources, bytes(out), out.nbytes());
                    send = data_of(flat, sources);
                  }
                  check(task.ctx,
                        MPI_Scatter(send, n, dt, out.data_ptr(), n, dt, root, comm->handle),
                        "MPI_Scatter");
                });
}

Work MpiGroup::reduce_scatter(at::Tensor& out, const Tensors& ins,
                              const ReduceScatterOptions& o) {
  auto c = ctx("reduce_scatter");
  detail::check_tensor(c, out, "output");
  detail::check_op(c, o.op, out.scalar_type());
  detail::check_list(c, ins, "inputs", size_, out, "output");
  int n = to_count(c, out.numel(), "output");
  MPI_Op op = op_of(o.op, out.scalar_type());
  int divisor = (o.op == ReduceOp::AVG && size_ > 1) ? size_ : 0;
  return submit(std::move(c), o, [ins, out, n, op, divisor, comm = comm_](Task& task) {
    MPI_Datatype dt = datatype_of(out.scalar_type());
    at::Tensor flat = flat_input(ins, bytes(out), out.nbytes());
    check(task.ctx,
          MPI_Reduce_scatter_block(data_of(flat, ins), out.data_ptr(), n, dt, op, comm->handle),
          "MPI_Reduce_scatter_block");
    if (divisor) out.div_(divisor);
  });
}

Work MpiGroup::all_to_all(Tensors& outs, const Tensors& ins, const CollectiveOptions& o) {
  auto c = ctx("all_to_all");
  if (ins.empty()) detail::throw_invalid(c, "inputs is empty; expected " + std::to_string(size_) + " tensors (one per rank)");
  detail::check_list_dtype(c, ins, "inputs", size_, ins[0], "inputs[0]");
  detail::check_list_dtype(c, outs, "outputs", size_, ins[0], "inputs[0]");
  // Per-pair sizes may differ: counts and displacements in elements.
  std::vector<int> scounts(size_), sdispls(size_), rcounts(size_), rdispls(size_);
  int64_t stotal = 0, rtotal = 0;
  for (int r = 0; r < size_; ++r) {
    scounts[r] = to_count(c, ins[r].numel(), "inputs[" + std::to_string(r) + "]");
    rcounts[r] = to_count(c, outs[r].numel(), "outputs[" + std::to_string(r) + "]");
    sdispls[r] = static_cast<int>(stotal);
    rdispls[r] = static_cast<int>(rtotal);
    stotal += scounts[r];
    rtotal += rcounts[r];
    to_count(c, stotal, "inputs (all together)");
    to_count(c, rtotal, "outputs (all together)");
  }
  return submit(std::move(c), o,
                [outs, ins, scounts, sdispls, rcounts, rdispls, comm = comm_](Task& task) mutable {
                  MPI_Datatype dt = datatype_of(ins[0].scalar_type());
                  at::Tensor send = flat_input(ins);
                  char* send_ptr = static_cast<char*>(data_of(send, ins));
                  at::Tensor recv = flat_output(outs, send_ptr, total_bytes(ins));
                  check(task.ctx,
                        MPI_Alltoallv(send_ptr, scounts.data(), sdispls.data(), dt,
                                      data_of(recv, outs), rcounts.data(), rdispls.data(), dt,
                                      comm->handle),
                        "MPI_Alltoallv");
                  unpack(recv, outs);
                });
}

}  // namespace ddp::mpi
