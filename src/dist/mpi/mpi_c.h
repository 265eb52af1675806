// <mpi.h> for C++ code, without the deprecated MPI C++ bindings that OpenMPI
// and MPICH would otherwise pull in (they need libmpi_cxx; we link MPI::MPI_C).
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
