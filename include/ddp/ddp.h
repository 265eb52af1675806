// Everything of ddp in one include.
#pragma once
#include "ddp/data/distributed_sampler.h"
#include "ddp/dist.h"
#include "ddp/parallel/comm_hook.h"
#include "ddp/parallel/consistency.h"
#include "ddp/parallel/distributed_data_parallel.h"
