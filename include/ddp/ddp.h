// The distributed core in one include: process groups, collectives, init and
// backends (ddp/dist.h), DistributedSampler, DistributedDataParallel with its
// comm hooks (PowerSGD included), Join, FullyShardedDataParallel,
// ZeroRedundancyOptimizer, optimizer state dicts, SyncBatchNorm, and the
// replica-consistency check. The training layer (readers,
// models, checkpoints, logs) is ddp/train.h.
#pragma once
#include "ddp/data/distributed_sampler.h"
#include "ddp/dist.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/consistency.h"
#include "ddp/parallel/distributed_data_parallel.h"
#include "ddp/parallel/fully_shard.h"
#include "ddp/parallel/fully_sharded.h"
#include "ddp/parallel/join.h"
#include "ddp/parallel/optimizer_state.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/parallel/zero.h"
