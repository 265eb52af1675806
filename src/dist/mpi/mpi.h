// The mpi backend. OpenMPI called directly; a communication thread makes calls asynchronous.
// Rank and size come from MPI (mpirun, Slurm); the store is not used.
#pragma once
#include <memory>

#include "dist/backend_impl.h"

namespace ddp::mpi {

bool is_available();
std::unique_ptr<detail::Backend> create(const BackendOptions& opts);

}  // namespace ddp::mpi
