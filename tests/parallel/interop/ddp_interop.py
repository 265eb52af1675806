"""PyTorch's own DDP (python3-torch, gloo) on a fixed problem; rank 0 writes
the parameters after the last step as lines "name v1 v2 ...", and the bucket
layout PyTorch used as lines "bucket shape;shape...". ddp_interop.cpp runs the
same problem with ddp's DDP and compares. Run under ddprun (torchrun's
variables). argv: OUT_FILE [HOOK STEPS], HOOK "none" or a ddp-train
--comm-hook spec: powersgd[:rank=R,start=S,min_rate=X,epsilon=E,seed=N,
error_feedback=0|1,warm_start=0|1,batch_same_shape=0|1]."""
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd


def init_weights(model):
    with torch.no_grad():
        for k, (_, p) in enumerate(model.named_parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + k).reshape(p.shape) * 0.3)


def batch(step, rank, features):
    x = torch.cos(torch.arange(4 * features, dtype=torch.float32) * 0.11 + step * 7 + rank * 3).reshape(4, features)
    y = (torch.arange(4) + step + rank) % 4
    return x, y


def powersgd_state(spec):
    names = {"rank": ("matrix_approximation_rank", int), "start": ("start_powerSGD_iter", int),
             "min_rate": ("min_compression_rate", float), "epsilon": ("orthogonalization_epsilon", float),
             "seed": ("random_seed", int), "error_feedback": ("use_error_feedback", lambda v: v in ("1", "true")),
             "warm_start": ("warm_start", lambda v: v in ("1", "true")),
             "batch_same_shape": ("batch_tensors_with_same_shape", lambda v: v in ("1", "true"))}
    kwargs = {}
    if ":" in spec:
        for item in spec.split(":", 1)[1].split(","):
            key, value = item.split("=")
            name, conv = names[key]
            kwargs[name] = conv(value)
    return psgd.PowerSGDState(process_group=None, **kwargs)


def main():
    out = sys.argv[1]
    hook = sys.argv[2] if len(sys.argv) > 2 else "none"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if hook == "none":
        features, model = 8, nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    else:  # matrices PowerSGD compresses, two of one shape, and tensors it leaves alone
        features = 8
        model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32),
                              nn.Tanh(), nn.Linear(32, 4))
    init_weights(model)
    # One bucket: with two, PyTorch 1.13's PowerSGD issues the all_reduces of
    # the second from gloo's threads (future callbacks) in an order that can
    # differ between ranks, and gloo aborts on the mismatched sizes.
    ddp = nn.parallel.DistributedDataParallel(model)
    layout = {}
    if hook != "none":
        state = powersgd_state(hook)
        fn = psgd.powerSGD_hook

        def recording(state, bucket):
            layout[bucket.index()] = ";".join("x".join(str(s) for s in p.shape) for p in bucket.parameters())
            return fn(state, bucket)
        ddp.register_comm_hook(state, recording)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(step, rank, features)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    if rank == 0:
        with open(out, "w") as f:
            for i in sorted(layout):
                f.write("bucket " + layout[i] + "\n")
            for name, p in model.named_parameters():
                f.write(name + " " + " ".join(repr(v) for v in p.detach().reshape(-1).tolist()) + "\n")
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
