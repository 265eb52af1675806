// The mpi backend. OpenMPI called directly; a communication thread makes calls asynchronous.
// Rank and size come from MPI (mpirun, Slurm); the store is not used.
#pragma once
#include "ddp/dist/backend.h"

namespace ddp::mpi {

bool is_available();
GroupPtr create(const BackendOptions& opts);

}  // namespace ddp::mpi
