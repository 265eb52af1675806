"""ZeRO-1 against python3-torch's ZeroRedundancyOptimizer. Run under ddprun.
argv: write OUT | check PYTHON_FILE OURS_FILE.
write: DDP + ZeroRedundancyOptimizer(Adam) for 10 steps on a fixed problem
(uneven partitions: 5 tensors of different sizes over the ranks); rank 0 saves
{"model": state_dict, "optimizer": the consolidated state_dict} with torch.save.
check (one process): the two files hold the same tensors and param_groups."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
import torch_adam  # noqa: E402
from torch_adam import adam_tolerance, moment_tolerance, within  # noqa: E402

STEPS, LR = 10, 0.01


def problem():
    import torch.nn as nn
    model = nn.Sequential(nn.Linear(8, 24), nn.Tanh(), nn.Linear(24, 12), nn.Tanh(), nn.Linear(12, 4, bias=False))
    with torch.no_grad():
        for k, p in enumerate(model.parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + k).reshape(p.shape) * 0.3)
    return model


def batch(step, rank):
    x = torch.cos(torch.arange(6 * 8, dtype=torch.float32) * 0.13 + step * 5 + rank * 3).reshape(6, 8)
    y = (torch.arange(6) + step + rank) % 4
    return x, y


def write(out):
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.optim import ZeroRedundancyOptimizer
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = problem()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=LR,
                                  betas=(0.8, 0.99), weight_decay=0.01)
    for step in range(STEPS):
        x, y = batch(step, rank)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, out)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # PyTorch 1.13's gloo teardown can spin once the peer has exited


def check(theirs_file, ours_file):
    theirs, ours = torch.load(theirs_file), torch.load(ours_file)
    torch_adam.CPP_TORCH = ours["libtorch"]
    # Bit for bit where Python's Adam rounds as LibTorch's (1.13); within the rounding bound on torch 2.x.
    tol = adam_tolerance(STEPS, LR)
    for name, t in theirs["model"].items():
        assert within(ours["model"][name], t, tol), \
            f"parameter {name} differs by {(t - ours['model'][name]).abs().max()} (tolerance {tol})"
    a, b = theirs["optimizer"], ours["optimizer"]
    assert sorted(a["state"]) == sorted(b["state"]), (sorted(a["state"]), sorted(b["state"]))
    for i in a["state"]:
        assert sorted(a["state"][i]) == sorted(b["state"][i]), (i, sorted(a["state"][i]), sorted(b["state"][i]))
        for k, v in a["state"][i].items():
            w = b["state"][i][k]
            ok = within(w, v, moment_tolerance(STEPS, v))
            assert ok, f"state[{i}][{k}] differs (tolerance {moment_tolerance(STEPS, v)})"
    assert len(a["param_groups"]) == len(b["param_groups"])
    for ga, gb in zip(a["param_groups"], b["param_groups"]):
        for k in ("lr", "betas", "eps", "weight_decay", "amsgrad", "params"):
            assert (list(ga[k]) if k in ("betas", "params") else ga[k]) == \
                   (list(gb[k]) if k in ("betas", "params") else gb[k]), (k, ga[k], gb[k])
    print(f"ZeRO-1 equals python3-torch's ZeroRedundancyOptimizer: {len(a['state'])} parameter states, "
          f"{len(theirs['model'])} parameters, " + ("bit for bit" if tol == 0 else f"within {tol:.2g} (Adam by lerp_)"))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3])
