"""PyTorch's Python DDP (python3-torch, gloo) on the job of `ddp-train fashion-mnist`:
FashionCNN on Fashion-MNIST, same flags, schedule, sampler, evaluation and JSON
schema, for time-to-accuracy beside ours (bench/compare_train.py reads both).
Run: build/bin/ddprun --nproc-per-node 2 --standalone /usr/bin/python3 bench/fashion_peer.py --json w2.json
     build/bin/ddprun --nproc-per-node 1 --standalone /usr/bin/python3 bench/fashion_peer.py --no-ddp --json w1.json
     ... bench/fashion_peer.py --device cuda   # on LOCAL_RANK's GPU, DDP over nccl, the data held on the GPU
Threads per rank follow OMP_NUM_THREADS (1 when unset). ddprun gives each rank cores / nproc-per-node, i.e. 2 at
world 1 on two cores: export OMP_NUM_THREADS=1 (as bench/ddp.sh does) to compare worlds at 1 thread per rank."""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler


class FashionCNN(nn.Module):
    """Registered in the order of ddp::models::FashionCNN, so parameters (and DDP buckets) line up."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 6 * 6, 600)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(600, 120)
        self.fc3 = nn.Linear(120, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
        return self.fc3(self.fc2(self.drop(self.fc1(h.flatten(1)))))


def read_idx(path):
    """An idx file (gzip or not): big-endian magic (0, 0, dtype 0x08 = uint8, ndim), then ndim uint32 sizes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not a uint8 idx file (magic {data[:4].hex()})")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = data[4 + 4 * ndim:]
    if len(body) != math.prod(shape):
        sys.exit(f"{path}: {len(body)} bytes of data for shape {shape}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    find = lambda name: next((p for p in (f"{data_dir}/{name}.gz", f"{data_dir}/{name}") if os.path.exists(p)),
                             f"{data_dir}/{name}.gz")
    images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = ((images.float() / 255 - 0.2860) / 0.3530).unsqueeze(1).contiguous()  # [N, 1, 28, 28]
    return x, labels.long()


def piecewise(knots):
    def f(x):
        if x <= knots[0][0]:
            return knots[0][1]
        for (x0, y0), (x1, y1) in zip(knots, knots[1:]):
            if x <= x1:
                return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
        return knots[-1][1]
    return f


def parse_schedule(spec):
    """Multiplier of the base lr as a function of (step, total), as ddp::train::LrSchedule::parse."""
    forms = ("valid forms: constant, step:N:GAMMA, cosine[:FINAL], onecycle[:PCT[:FINAL]], "
             "piecewise:X0:Y0,X1:Y1,...")
    parts = spec.split(":")
    kind = parts[0]
    try:
        args = [float(v) for v in parts[1:]] if kind != "piecewise" else []
        knots = [tuple(float(v) for v in k.split(":")) for k in spec[len("piecewise:"):].split(",")] \
            if kind == "piecewise" else []
    except ValueError:
        sys.exit(f"schedule '{spec}': not a number; {forms}")
    frac = lambda s, total: min(1.0, s / (total - 1)) if total > 1 else 1.0
    if kind == "constant" and len(parts) == 1:
        return lambda s, total: 1.0
    if kind == "step" and len(parts) == 3:
        if int(args[0]) < 1:
            sys.exit(f"schedule '{spec}': the step size must be >= 1")
        return lambda s, total: args[1] ** (s // int(args[0]))
    if kind == "cosine" and len(parts) <= 2:
        final = args[0] if args else 0.0
        return lambda s, total: final + (1 - final) * 0.5 * (1 + math.cos(math.pi * frac(s, total)))
    if kind == "onecycle" and len(parts) <= 3:
        pct, final = (args + [0.25, 0.0][len(args):])[:2]
        if not 0 < pct < 1:
            sys.exit(f"schedule '{spec}': the peak fraction must be in (0, 1)")
        f = piecewise([(0.0, 0.0), (pct, 1.0), (1.0, final)])
        return lambda s, total: f(frac(s, total))
    if kind == "piecewise":
        if any(len(k) != 2 for k in knots) or any(not 0 <= k[0] <= 1 for k in knots) or \
                any(b[0] <= a[0] for a, b in zip(knots, knots[1:])):
            sys.exit(f"schedule '{spec}': knots must be X:Y with X increasing within [0, 1]")
        f = piecewise(knots)
        return lambda s, total: f(frac(s, total))
    sys.exit(f"schedule '{spec}' is not understood; {forms}")


def evaluate(model, x, y, batch, rank, world, use_dist):
    """Every test sample exactly once over the ranks: this rank takes r, r+W, ...; sums all-reduced in float64."""
    idx = torch.arange(rank, x.size(0), world, device=x.device)
    sums = torch.zeros(4, dtype=torch.float64, device=x.device)  # loss sum, top-1 hits, top-5 hits, samples
    model.eval()
    with torch.no_grad():
        for start in range(0, idx.numel(), batch):
            i = idx[start:start + batch]
            logits, target = model(x.index_select(0, i)), y.index_select(0, i)
            top = logits.topk(min(5, logits.size(1)), 1).indices.eq(target.unsqueeze(1))
            sums += torch.stack([F.cross_entropy(logits, target, reduction="sum").double(), top[:, 0].sum().double(),
                                 top.any(1).sum().double(), torch.tensor(float(i.numel()), dtype=torch.float64,
                                                                         device=x.device)])
    model.train()
    if use_dist:
        dist.all_reduce(sums)
    loss, hit1, hit5, n = sums.tolist()
    return dict(val_loss=loss / n, acc1=hit1 / n, acc5=hit5 / n, count=int(n)) if n else dict(
        val_loss=0.0, acc1=0.0, acc5=0.0, count=0)


def main():
    start = time.perf_counter()
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--schedule", default="onecycle:0.2:0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--eval-batch", type=int, default=500)
    p.add_argument("--eval-every", type=int, default=0,
                   help="steps between evaluations within an epoch (0: after each epoch only), as ddp-train's")
    p.add_argument("--limit-train", type=int, default=0, help="first N training samples (0: all)")
    p.add_argument("--limit-test", type=int, default=0, help="first N test samples (0: all)")
    p.add_argument("--no-ddp", action="store_true", help="world 1 only: a plain loop, no process group")
    p.add_argument("--device", default="cpu", help="cpu, or cuda: LOCAL_RANK's GPU (DDP over nccl)")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.device not in ("cpu", "cuda"):
        sys.exit(f"fashion_peer.py: --device {a.device}: use cpu or cuda")
    device = torch.device("cpu")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit(f"fashion_peer.py: --device cuda: no GPU is visible to torch {torch.__version__}")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    schedule = parse_schedule(a.schedule)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_ddp = not a.no_ddp
    if not use_ddp and world > 1:
        sys.exit("fashion_peer.py: --no-ddp needs a world of 1")
    if use_ddp:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if use_ddp else 0

    train_x, train_y = load(a.data_dir, "train", a.limit_train)
    test_x, test_y = load(a.data_dir, "test", a.limit_test)
    train_x, train_y, test_x, test_y = (t.to(device) for t in (train_x, train_y, test_x, test_y))
    torch.manual_seed(a.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    net = FashionCNN().to(device)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None) \
        if use_ddp else net
    torch.manual_seed(a.seed * 1000003 + 1 + rank)  # dropout differs across ranks
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay,
                          nesterov=a.momentum > 0)
    sampler = DistributedSampler(range(train_x.size(0)), num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    steps_per_epoch = len(sampler) // a.batch_size
    if steps_per_epoch < 1:
        sys.exit(f"fashion_peer.py: {len(sampler)} training samples per rank, fewer than one batch of {a.batch_size}")
    total_steps = steps_per_epoch * a.epochs
    config = dict(recipe="fashion-mnist", epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, momentum=a.momentum,
                  weight_decay=a.weight_decay, nesterov=a.momentum > 0, schedule=a.schedule, seed=a.seed,
                  data_dir=a.data_dir, eval_batch=a.eval_batch, train_samples=train_x.size(0),
                  test_samples=test_x.size(0), steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                  eval_every=a.eval_every, sampler="DistributedSampler",
                  backend=("nccl" if device.type == "cuda" else "gloo") if use_ddp else None, device=str(device),
                  threads_per_rank=threads,
                  torch=torch.__version__)
    if rank == 0:
        print(f"pytorch fashion-mnist: {world} rank(s), {'DDP over ' + config['backend'] if use_ddp else 'no DDP'} on {device}, "
              f"{train_x.size(0)} training samples, {test_x.size(0)} test samples, batch {a.batch_size} per rank, "
              f"{steps_per_epoch} steps per epoch, lr {a.lr} ({a.schedule})", flush=True)

    if use_ddp:
        dist.barrier()
    epochs, evals, step, train_total = [], [], 0, 0.0
    t_begin = time.perf_counter()
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler), dtype=torch.long, device=device)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)  # read at the epoch's end: no sync per step
        for b in range(steps_per_epoch):
            i = order[b * a.batch_size:(b + 1) * a.batch_size]
            lr = a.lr * schedule(step, total_steps)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad()
            loss = F.cross_entropy(model(train_x.index_select(0, i)), train_y.index_select(0, i))
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.detach().double()
            # ddp-train's --eval-every: not within half an interval of the epoch's end (evaluated anyway)
            if a.eval_every > 0 and step % a.eval_every == 0 and 2 * (steps_per_epoch - b - 1) >= a.eval_every:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # the steps before are training time
                e0 = time.perf_counter()
                r = evaluate(model, test_x, test_y, a.eval_batch, rank, world, use_ddp)
                evals.append(dict(step=step, epoch=epoch + (b + 1) / steps_per_epoch, acc1=r["acc1"],
                                  val_loss=r["val_loss"], unix_time=time.time()))
                if rank == 0:
                    print(f"step {step} (epoch {evals[-1]['epoch']:.2f}) | acc1 {100 * r['acc1']:.2f}%", flush=True)
                t0 += time.perf_counter() - e0  # evaluation is not training time
        loss_sum = loss_sum.item()  # waits for the epoch's last step
        train_s = time.perf_counter() - t0
        train_total += train_s
        r = evaluate(model, test_x, test_y, a.eval_batch, rank, world, use_ddp)
        throughput = steps_per_epoch * a.batch_size * world / train_s
        evals.append(dict(step=step, epoch=epoch + 1.0, acc1=r["acc1"], val_loss=r["val_loss"], unix_time=time.time()))
        epochs.append(dict(epoch=epoch + 1, train_seconds=train_s, cumulative_train_seconds=train_total,
                           cumulative_wall_seconds=time.perf_counter() - t_begin,
                           train_loss=loss_sum / steps_per_epoch, val_loss=r["val_loss"], acc1=r["acc1"],
                           acc5=r["acc5"], val_samples=r["count"], throughput=throughput))
        if rank == 0:
            print(f"epoch {epoch + 1}/{a.epochs} | train_loss {loss_sum / steps_per_epoch:.4f} | "
                  f"val_loss {r['val_loss']:.4f} | acc1 {100 * r['acc1']:.2f}% | acc5 {100 * r['acc5']:.2f}% | "
                  f"{throughput:.0f} samples/s | {train_s:.2f} s", flush=True)
    total = time.perf_counter() - start
    if rank == 0:
        print(f"done: acc1 {100 * epochs[-1]['acc1']:.2f}% after {a.epochs} epoch(s), "
              f"{train_total:.2f} s training, {total:.2f} s in all", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(dict(framework="pytorch", world=world, ddp=use_ddp, config=config, epochs=epochs,
                               evals=evals, total_seconds=total), f, indent=1)
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    if use_ddp:
        dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
