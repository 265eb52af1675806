// Entry points of the mpi backend (mpi.h) and the lifetime of
// the communicators behind its groups.
#include "dist/mpi/mpi.h"

#include "dist/mpi/mpi_beat.h"
#include "dist/mpi/mpi_dtypes.h"
#include "dist/mpi/mpi_group.h"
#include "dist/mpi/mpi_runtime.h"

namespace ddp::mpi {

Comm::~Comm() {
  if (handle == MPI_COMM_NULL) return;
  Runtime* rt = Runtime::peek();
  if (!rt || !rt->release_comm(handle)) return;  // freed at MPI_Finalize already
  MPI_Comm c = handle;
  if (rt->on_comm_thread()) {
    MPI_Comm_free(&c);
  } else {
    // Not after shutdown: MPI_Finalize releases whatever is left.
    rt->post([c]() mutable { MPI_Comm_free(&c); });
  }
}

bool is_available() { return true; }

std::unique_ptr<detail::Backend> create(const BackendOptions& opts) {
  Runtime& rt = Runtime::get();
  ErrorContext c{"mpi", rt.world_rank(), rt.world_size(), "init"};
  const std::string hint =
      " (with mpi, rank and world size come from mpirun or srun; pass -1 to "
      "take MPI's)";
  if (opts.rank >= 0 && opts.rank != rt.world_rank())
    throw_invalid(c, "rank " + std::to_string(opts.rank) +
                         " was requested but MPI gave this "
                         "process rank " +
                         std::to_string(rt.world_rank()) + hint);
  if (opts.world_size > 0 && opts.world_size != rt.world_size())
    throw_invalid(c, "world_size " + std::to_string(opts.world_size) + " was requested but MPI_COMM_WORLD has " +
                         std::to_string(rt.world_size()) + " processes" + hint);
  // Each group gets its own communicator, so groups never match each other's
  // messages; MPI errors on it are returned (and thrown as CommError). With
  // peers, every rank makes a second one alike for the heartbeat's messages.
  const int copies = rt.world_size() > 1 ? 2 : 1;
  auto result = std::make_shared<std::vector<MPI_Comm>>();
  run_and_wait(rt, c, opts.timeout, [result, copies](Task& task) {
    for (int i = 0; i < copies; ++i) {
      MPI_Comm out = MPI_COMM_NULL;
      check(task.ctx, MPI_Comm_dup(MPI_COMM_WORLD, &out), "MPI_Comm_dup");
      int rc = MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
      if (rc != MPI_SUCCESS) MPI_Comm_free(&out);
      check(task.ctx, rc, "MPI_Comm_set_errhandler");
      result->push_back(out);
    }
  });
  for (MPI_Comm m : *result) rt.adopt_comm(m);
  CommPtr beat = copies > 1 ? std::make_shared<Comm>((*result)[1]) : nullptr;
  return std::make_unique<MpiBackend>(rt, std::make_shared<Comm>((*result)[0]), rt.world_rank(), rt.world_size(),
                                      std::move(beat));
}

std::unique_ptr<detail::BeatChannel> MpiBackend::beat_channel() {
  // Without MPI_THREAD_MULTIPLE (DDP_HEARTBEAT_TIMEOUT=0, or MPI initialized by the application with less) the
  // heartbeat's thread may not call MPI: no heartbeat.
  if (!beat_comm_ || !rt_.concurrent()) return nullptr;
  return make_beat_channel(rt_, beat_comm_, rank_, size_);
}

}  // namespace ddp::mpi
