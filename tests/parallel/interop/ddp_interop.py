"""PyTorch's own DDP (python3-torch, gloo) on a fixed problem; rank 0 writes
the parameters after 5 steps as lines "name v1 v2 ...". ddp_interop.cpp runs
the same problem with ddp's DDP and compares. Run under torch.distributed.run
with 2 processes; argv[1] is the output file."""
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def init_weights(model):
    with torch.no_grad():
        for k, (_, p) in enumerate(model.named_parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + k).reshape(p.shape) * 0.3)


def batch(step, rank):
    x = torch.cos(torch.arange(4 * 8, dtype=torch.float32) * 0.11 + step * 7 + rank * 3).reshape(4, 8)
    y = (torch.arange(4) + step + rank) % 4
    return x, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    init_weights(model)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(5):
        x, y = batch(step, rank)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            for name, p in model.named_parameters():
                f.write(name + " " + " ".join(repr(v) for v in p.detach().reshape(-1).tolist()) + "\n")
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
