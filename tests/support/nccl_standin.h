// A CPU stand-in for nccl's contract, for the suites: gloo carries the bytes (a real engine), and the backend
// declares and does what nccl does, so the front, DDP, its hooks, ZeRO, FSDP, Join and SyncBatchNorm take nccl's
// paths on the CPU: AVG and reduce_scatter native (no division or all_to_all by the front), every floating dtype
// reduced as it is (float16 and bfloat16 too: no widening by the front), no bitwise reductions (refused: the
// suites decide by ProcessGroup::supports), and no call check by default (nccl's: DDP_DEBUG=DETAIL turns it on).
// Point to point in NCCL's order (a pair's sends and receives in one queue; a send completes once the peer's
// receive started). Results land in the caller's tensors when their Work is waited for, as CPU tensors staged
// through nccl's GPU do (PyTorch's contract: read after wait()). What it cannot stand in for: streams (its waits
// block the host, as gloo's), and the GPU.
//
//   GroupPtr g = ddp::testing::make_nccl_standin(opts);   // run_ranks("nccl-standin", world, fn) does this
#pragma once
#include "ddp/dist.h"

namespace ddp::testing {

GroupPtr make_nccl_standin(const BackendOptions& opts);
// How many stand-in groups were aborted (at exit: dist/exit_abort.h) in this process.
int nccl_standin_aborts();

}  // namespace ddp::testing
