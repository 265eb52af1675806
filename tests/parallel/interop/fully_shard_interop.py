"""ddp's fully_shard against PyTorch's own (FSDP2, torch 2.x, gloo, a CPU device mesh). Run under ddprun.
argv: write OUT [bf16] | check W THEIRS OURS [bf16].
write: a residual model (three LayerNorm-MLP blocks, each fully_shard'ed, then the root) trained 6 steps with
SGD + momentum on rank-dependent data; each rank saves its loss per step and its local shard of every
parameter (DTensor.to_local()) to OUT.<rank>.pt. bf16: MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32) on every unit.
check (one process): every rank's losses and shards equal ours (fully_shard_interop.cpp)."""
import os
import sys

import torch

STEPS, LR, MOMENTUM = 6, 0.1, 0.9


def problem():
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1, self.fc2 = nn.LayerNorm(10), nn.Linear(10, 7), nn.Linear(7, 10)

        def forward(self, x):
            return x + self.fc2(torch.tanh(self.fc1(self.ln(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(6, 10)
            self.blocks = nn.ModuleList([Block() for _ in range(3)])
            self.head = nn.Linear(10, 4)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    model = Net()
    with torch.no_grad():
        for k, p in enumerate(model.parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + k).reshape(p.shape) * 0.3)
    return model


def batch(step, rank):
    x = torch.cos(torch.arange(5 * 6, dtype=torch.float32) * 0.13 + step * 5 + rank * 3).reshape(5, 6)
    y = (torch.arange(5) + step + rank) % 4
    return x, y


def write(out, bf16):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = problem()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else \
        MixedPrecisionPolicy()
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(STEPS):
        x, y = batch(step, rank)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    shards = {n: p.to_local().detach().clone() for n, p in model.named_parameters()}
    torch.save({"losses": torch.stack(losses), "shards": shards}, f"{out}.{rank}.pt")
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def check(world, theirs, ours, bf16):
    # World 2: both halve each gradient before summing two terms, so bit for bit. World 4: PyTorch divides by 2
    # before and after the sum (FSDP2's factors for gloo, which has no AVG), ours by 4 before (the same scaling,
    # exactly), but gloo's reduce_scatter may add the 4 terms in another order: a few ulps. World 3: PyTorch divides
    # by 2 and 1.5, ours by 3: each gradient element differs by at most 2 ulps. Through momentum (at most
    # 1/(1 - 0.9) = 10 steps' worth) and lr 0.1 that is <= 0.1 * 10 * 3 * 2^-24 * |g| per step, |g| < 1 here: 6
    # steps stay below 2e-6, and atol 1e-5 leaves 5x. A wrong average moves a weight by ~1e-2. bf16: the same
    # casts (each unit's weights and inputs to bf16, gradients reduced in float32), so world 2 is bit for bit; a
    # float32 ulp elsewhere can turn into one bf16 ulp (2^-8) of a later activation: atol 1e-3.
    exact = world == 2
    atol = 1e-3 if bf16 else 1e-5
    for r in range(world):
        a, b = torch.load(f"{theirs}.{r}.pt"), torch.load(f"{ours}.{r}.pt")
        assert sorted(a["shards"]) == sorted(b["shards"]), (sorted(a["shards"]), sorted(b["shards"]))
        pairs = [("loss", a["losses"], b["losses"])] + [(n, t, b["shards"][n]) for n, t in a["shards"].items()]
        for name, t, u in pairs:
            assert t.shape == u.shape, f"rank {r} {name}: shape {tuple(u.shape)}, PyTorch's {tuple(t.shape)}"
            ok = torch.equal(t, u) if exact else torch.allclose(t, u, rtol=0, atol=atol)
            assert ok, f"rank {r} {name} differs from PyTorch's fully_shard by {(t - u).abs().max()}"
    print(f"fully_shard{' with bf16 parameters' if bf16 else ''} equals PyTorch's at world {world}: "
          f"{len(a['shards'])} parameters' shards on each of {world} ranks and {STEPS} losses, " +
          ("bit for bit" if exact else f"within {atol}"))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3:] == ["bf16"])
    else:
        check(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:] == ["bf16"])
