"""PyTorch's Python DDP (python3-torch, gloo) on the workloads of
`ddp-bench ddp`: same models, batch, synthetic data and timing.
Run: build/bin/ddprun --nproc-per-node 2 --standalone /usr/bin/python3 bench/ddp_peer.py --model mlp
--device cuda: on LOCAL_RANK's GPU, over nccl, timed after torch.cuda.synchronize() (the device check's peer)."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def mlp(hidden):
    layers = []
    dims = [1024, hidden, hidden, hidden, 32]
    for i in range(4):
        lin = nn.Linear(dims[i], dims[i + 1], bias=False)
        nn.init.kaiming_uniform_(lin.weight)
        layers += [lin] + ([nn.Tanh()] if i < 3 else [])
    return nn.Sequential(*layers)


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.layer2 = nn.Sequential(nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.fc1 = nn.Linear(64 * 6 * 6, 600)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(600, 120)
        self.fc3 = nn.Linear(120, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(x)).flatten(1)
        return self.fc3(self.fc2(self.drop(self.fc1(x))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "wide", "cnn"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--json", default="")
    a = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_ddp = not a.no_ddp
    device = torch.device("cpu")
    if a.device == "cuda":
        if torch.cuda.device_count() == 0:
            sys.exit(f"ddp_peer.py: --device cuda: no GPU is visible to torch {torch.__version__}")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    backend = "nccl" if a.device == "cuda" else "gloo"
    if use_ddp:
        dist.init_process_group(backend)
    rank = dist.get_rank() if use_ddp else 0
    torch.manual_seed(1 + rank)
    if a.model == "cnn":
        net, x, y = FashionCNN(), torch.randn(a.batch, 1, 28, 28), torch.randint(10, (a.batch,))
    else:
        net = mlp(2048 if a.model == "wide" else 256)
        x, y = torch.randn(a.batch, 1024), torch.randint(32, (a.batch,))
    net, x, y = net.to(device), x.to(device), y.to(device)
    model = nn.parallel.DistributedDataParallel(net) if use_ddp else net

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync()
    if use_ddp:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    ms = torch.tensor([(time.perf_counter() - t0) * 1000 / a.steps], dtype=torch.float64, device=device)
    if use_ddp:
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    ms = ms.item()
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        print(f"pytorch: model {a.model} ({params / 1e6:.2f}M parameters) on {device}, batch {a.batch}, {world} ranks, "
              f"{'DDP over ' + backend if use_ddp else 'no DDP'}: step {ms:.3f} ms | {1000 * a.batch * world / ms:.0f} samples/s")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(dict(tool="pytorch", model=a.model, device=str(device), world=world, ddp=use_ddp,
                               backend=backend, batch=a.batch,
                               params=params, ms_per_step=ms), f)
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    if use_ddp:
        dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
