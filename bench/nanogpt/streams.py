"""nanoGPT's training of the CPU configuration (float32, PyTorch), its initial weights and its stream of batches
chosen apart, to tell which decides where a run ends at world 1 (docs/benchmarks.md, "Where world 1 ends").

  streams.py DATA_DIR [--seed S] [--init nano|CHECKPOINT] [--data nano|reseed:D|ddp:D]

--init nano: nanoGPT's own initialisation after torch.manual_seed(1337 + S); CHECKPOINT: the weights of a ddp-train
  shakespeare-char checkpoint (a run with --lr 1e-30 --limit-train 12 --checkpoint-every 1 keeps its initial ones).
--data nano: nanoGPT's get_batch, drawing each batch from the global generator as it comes (after the init);
  reseed:D: the same after torch.manual_seed(D); ddp:D: ddp-train's windows for --seed D (drawn up front from a
  generator seeded D, in the order of its DistributedSampler's permutation, also seeded D).
Prints one JSON line: the validation loss (every window of the last 10%) after 1750 and 2000 iterations.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt as ng  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", default="nano")
    p.add_argument("--data", default="nano")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    vocab, train, val = ng.load_text(a.data_dir)
    B, T, iters = 12, 64, 2000
    torch.manual_seed(1337 + a.seed)
    model = ng.GPT(ng.Config(vocab_size=len(vocab)))
    if a.init != "nano":
        model.load_state_dict(torch.load(a.init)["model"])
    windows = None
    if a.data.startswith("ddp:"):
        d = int(a.data[4:])
        offsets = torch.randint(len(train) - T, (iters * B, 1), generator=torch.Generator().manual_seed(d))
        windows = train[offsets + torch.arange(T + 1)]
        order = torch.randperm(iters * B, generator=torch.Generator().manual_seed(d))
    elif a.data.startswith("reseed:"):
        torch.manual_seed(int(a.data[7:]))
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))

    def lr_at(it, warm=100, lr=1e-3, low=1e-4):  # nanoGPT's get_lr
        if it < warm:
            return lr * (it + 1) / (warm + 1)
        return low + 0.5 * (1 + math.cos(math.pi * (it - warm) / (iters - warm))) * (lr - low)

    out = {"seed": a.seed, "init": a.init if a.init == "nano" else "checkpoint", "data": a.data}
    start = time.time()
    for it in range(iters + 1):
        if it in (1750, 2000):
            out["val%d" % it] = round(ng.val_loss(model, val, T), 4)
        if it == iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if windows is not None:
            rows = windows[order[it * B:(it + 1) * B]]
            x, y = rows[:, :T].contiguous(), rows[:, 1:].contiguous()
        else:
            ix = torch.randint(len(train) - T, (B,))
            x = torch.stack([train[i:i + T] for i in ix])
            y = torch.stack([train[i + 1:i + 1 + T] for i in ix])
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    out["seconds"] = round(time.time() - start, 1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
