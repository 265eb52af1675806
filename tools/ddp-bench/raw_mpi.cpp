// The baseline: plain MPI collectives on the same buffers, timed the same way.
#include <mpi.h>

#include "bench.h"

namespace ddp::bench {

double raw_mpi_time_us(const std::string& op, void* in, void* out, long long count, int iters, double gap_ms) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return -1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int n = static_cast<int>(count);
  auto once = [&] {
    if (op == "all_reduce")
      MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (op == "all_gather")
      MPI_Allgather(in, n / size, MPI_FLOAT, out, n / size, MPI_FLOAT, MPI_COMM_WORLD);
    else if (op == "broadcast")
      MPI_Bcast(out, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (op == "reduce_scatter")
      MPI_Reduce_scatter_block(in, out, n / size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  once();  // warm-up
  double us = 0;
  if (gap_ms > 0) {
    for (int i = 0; i < iters; ++i) {
      spin_ms(gap_ms);
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      once();
      us += (MPI_Wtime() - t0) * 1e6 / iters;
    }
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) once();
    us = (MPI_Wtime() - t0) * 1e6 / iters;
  }
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

}  // namespace ddp::bench
