// ddp-bench subcommands.
#pragma once
#include <string>
#include <vector>

namespace ddp::bench {

// Arguments after the subcommand name.
int collectives_main(const std::vector<std::string>& args);
// Training-step time under DDP.
int ddp_main(const std::vector<std::string>& args);

// Plain MPI calls on MPI_COMM_WORLD, the peer our mpi backend is measured
// against. Returns microseconds per call (max over ranks), or -1 when MPI is
// not built in.
double raw_mpi_time_us(const std::string& op, void* in, void* out, long long count, int iters);

}  // namespace ddp::bench
