// Mapping of tensor dtypes and ReduceOps onto MPI datatypes and MPI_Ops, and
// the checks of MPI error codes and element counts.
//
// Float, Double, Int, Long and Byte map to MPI's own types and ops. Half and
// BFloat16 travel as MPI_UINT16_T and reduce through user-defined MPI_Ops that
// compute in float and round back (SUM, PRODUCT, MIN, MAX; AVG is SUM followed
// by a division done by the caller).
#pragma once
#include <ATen/ATen.h>
#include "dist/mpi/mpi_c.h"

#include <cstdint>
#include <string>

#include "ddp/dist/types.h"
#include "dist/error_context.h"

namespace ddp::mpi {

// The MPI datatype that carries one element of `dtype` (validated before).
MPI_Datatype datatype_of(at::ScalarType dtype);

// The MPI_Op for `op` on `dtype` (validated with detail::check_op before).
// AVG maps to the SUM op; divide the result by the group size afterwards.
MPI_Op op_of(ReduceOp op, at::ScalarType dtype);

// Creates the half/bfloat16 MPI_Ops; called once after MPI_Init, before any
// collective runs.
void create_custom_ops();

// MPI counts are ints: returns n, or throws InvalidArgument naming `name`.
int to_count(const ErrorContext& ctx, int64_t n, const std::string& name);

// Throws CommError "<prefix><call> failed: <MPI error string>" unless rc is
// MPI_SUCCESS.
void check(const ErrorContext& ctx, int rc, const char* call);

// MPI's text for an error code ("MPI_ERR_TRUNCATE: message truncated").
std::string error_string(int rc);

}  // namespace ddp::mpi
