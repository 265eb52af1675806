// ddp-bench subcommands.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::bench {

// Arguments after the subcommand name.
int collectives_main(const std::vector<std::string>& args);
// Training-step time under DDP.
int ddp_main(const std::vector<std::string>& args);

// Plain MPI calls on MPI_COMM_WORLD, the peer our mpi backend is measured
// against. Returns microseconds per call (max over ranks), or -1 when MPI is
// not built in.
double raw_mpi_time_us(const std::string& op, void* in, void* out, long long count, int iters);

// c10d's ProcessGroupGloo used directly, the engine under PyTorch's gloo: the
// peer our gloo backend is measured against in the same processes. Only
// all_reduce, all_gather and broadcast (c10d 1.13 has no gloo reduce_scatter).
struct RawGloo;
std::shared_ptr<RawGloo> make_raw_gloo(const StorePtr& store, int rank, int size);
double raw_gloo_time_us(RawGloo& raw, const std::string& op, at::Tensor& in, at::Tensor& out, long long count,
                        int iters);

}  // namespace ddp::bench
