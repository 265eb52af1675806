// How much of a synchronised backward's gradient communication overlapped its computation: DDP's bucket
// reductions (DistributedDataParallel::stats()), FSDP's reduce-scatters (ShardedModel::stats()).
#pragma once
#include <cstdint>

namespace ddp {

// Cumulative timings of synchronised backward passes, on the parameters' device: the host clock on the CPU, CUDA
// events on a GPU (where the host does not wait for nccl's reductions), settled when stats() is read.
struct DDPStats {
  int64_t iterations = 0;
  double comm_ms = 0;     // first reduction (bucket, unit) launched -> last reduction done
  double exposed_ms = 0;  // end of backward computation -> last reduction done
  double overlapped_ms() const { return comm_ms - exposed_ms; }
};

}  // namespace ddp
