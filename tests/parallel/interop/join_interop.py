"""PyTorch's DDP under torch.distributed.algorithms.Join (python3-torch, gloo)
on uneven inputs: rank r trains on 3 + 2r batches. Rank 0 writes the
parameters and buffers after Join's exit as lines "name v1 v2 ...";
join_interop.cpp runs the same with ddp::Join and compares. Run under ddprun.
argv: OUT_FILE DIVIDE MODEL, DIVIDE "initial" or "active"
(divide_by_initial_world_size), MODEL "mlp" or "bn" (a BatchNorm1d inside)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join


def init_weights(model):
    with torch.no_grad():
        for k, (_, p) in enumerate(model.named_parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + k).reshape(p.shape) * 0.3)


def batch(step, rank):
    x = torch.cos(torch.arange(4 * 8, dtype=torch.float32) * 0.11 + step * 7 + rank * 3).reshape(4, 8)
    y = (torch.arange(4) + step + rank) % 4
    return x, y


def main():
    out, divide, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if kind == "bn":
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 4))
    else:
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    init_weights(model)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Join([ddp], divide_by_initial_world_size=(divide == "initial")):
        for step in range(3 + 2 * rank):
            x, y = batch(step, rank)
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
    if rank == 0:
        with open(out, "w") as f:
            for name, t in list(model.named_parameters()) + list(model.named_buffers()):
                f.write(name + " " + " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist()) + "\n")
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
