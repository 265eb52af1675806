#!/usr/bin/env python3
"""nanoGPT's character-level Shakespeare in plain PyTorch: the peer that ddp's shakespeare-char recipe races.

The model is nanoGPT's model.py (bias False, tied lm_head, its initialisation); training is nanoGPT's train.py
for config/train_shakespeare_char.py with the README's CPU overrides (4 layers, 4 heads, 128 dims, context 64,
batch 12, 2,000 iterations, lr 1e-3 decayed to 1e-4 over them, 100 warm-up iterations, AdamW betas 0.9/0.99,
weight decay 0.1 on matrices, clipping at 1, dropout 0), on the first 90% of input.txt, a random window per
sample. Under torchrun (DDP over gloo) every rank draws its own batches, as nanoGPT's DDP does.

  train:    nanogpt.py train DATA_DIR [--iters N] [--eval-every N] [--dtype fp32|bf16] [--threads N]
            prints one JSON line per evaluation (rank 0): {"iter", "val_loss", "seconds" since the start,
            "train_seconds" (without the evaluations), "tokens" trained on by all ranks}
  evaluate: nanogpt.py eval DATA_DIR CHECKPOINT   (a ddp-train shakespeare-char checkpoint)
            prints the validation loss of its weights: every non-overlapping window of the last 10%
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.dropout = c.n_head, c.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        self.register_buffer("mask", torch.ones(c.block_size, c.block_size, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
            y = att @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(c.n_embd, c.bias), CausalSelfAttention(c)
        self.ln_2, self.mlp = LayerNorm(c.n_embd, c.bias), MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Config:
    def __init__(self, **kw):
        self.vocab_size, self.block_size, self.n_layer, self.n_head, self.n_embd = 65, 64, 4, 4, 128
        self.dropout, self.bias = 0.0, False
        self.__dict__.update(kw)


class GPT(nn.Module):
    """nanoGPT's GPT; ddp's parameter names (wte, wpe, h<i>, ln_f: no "transformer." and no lm_head copy)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        for i in range(c.n_layer):
            self.add_module("h%d" % i, Block(c))
        self.ln_f = LayerNorm(c.n_embd, c.bias)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for i in range(self.c.n_layer):
            x = getattr(self, "h%d" % i)(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied lm_head
        loss = None if targets is None else F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def load_text(data_dir):
    text = open(os.path.join(data_dir, "input.txt"), "rb").read().decode("latin-1")
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = len(data) * 9 // 10
    return vocab, data[:n], data[n:]


def val_windows(val, block):
    w = (len(val) - 1) // block
    return val[: w * block].view(w, block), val[1 : w * block + 1].view(w, block)


@torch.no_grad()
def val_loss(model, val, block, batch=500, autocast=None):
    model.eval()
    x, y = val_windows(val, block)
    total = 0.0
    for i in range(0, len(x), batch):
        with autocast or torch.autocast("cpu", enabled=False):
            _, loss = model(x[i : i + batch], y[i : i + batch])
        total += loss.item() * len(x[i : i + batch])
    model.train()
    return total / len(x)


def train(a):
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if distributed else 0
    if a.threads:
        torch.set_num_threads(a.threads)
    vocab, train_data, val = load_text(a.data_dir)
    torch.manual_seed(a.seed + rank)
    c = Config(vocab_size=len(vocab))
    model = GPT(c)
    if distributed:  # every rank starts from rank 0's weights
        model = nn.parallel.DistributedDataParallel(model)
    raw = model.module if distributed else model
    decay = [p for p in raw.parameters() if p.dim() >= 2]
    no_decay = [p for p in raw.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if a.dtype == "bf16" else None

    def lr_at(it):  # nanoGPT's get_lr: linear warm-up, then cosine to min_lr over the iterations
        if it < a.warmup:
            return a.lr * (it + 1) / (a.warmup + 1)
        ratio = (it - a.warmup) / max(1, a.iters - a.warmup)
        return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)

    world = torch.distributed.get_world_size() if distributed else 1
    fixed = None
    if a.fixed_windows:  # ddp's recipe: every window of the run drawn once up front, then shuffled into batches
        offsets = torch.randint(len(train_data) - c.block_size, (a.iters * a.batch,))
        fixed = offsets[torch.randperm(len(offsets))].view(a.iters, a.batch)
    start, tokens, evaluating = time.perf_counter(), 0, 0.0
    for it in range(a.iters + 1):
        if it % a.eval_every == 0 or it == a.iters:
            t0 = time.perf_counter()
            loss = val_loss(raw, val, c.block_size, autocast=autocast)
            evaluating += time.perf_counter() - t0
            now = time.perf_counter() - start
            if rank == 0:
                print(json.dumps({"iter": it, "val_loss": loss, "seconds": now, "train_seconds": now - evaluating,
                                  "tokens": tokens}), flush=True)
            if a.target and loss <= a.target:
                break
        if it == a.iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        ix = fixed[it] if fixed is not None else torch.randint(len(train_data) - c.block_size, (a.batch,))
        x = torch.stack([train_data[i : i + c.block_size] for i in ix])
        y = torch.stack([train_data[i + 1 : i + 1 + c.block_size] for i in ix])
        with autocast or torch.autocast("cpu", enabled=False):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += a.batch * c.block_size * world
    if distributed:
        torch.distributed.destroy_process_group()


def evaluate(a):
    vocab, _, val = load_text(a.data_dir)
    ckpt = torch.load(a.checkpoint)
    state = ckpt["model"]
    n_layer = len({k.split(".")[0] for k in state if k.startswith("h")})
    n_embd = state["wte.weight"].shape[1]
    block = state["wpe.weight"].shape[0]
    n_head = {128: 4, 384: 6}.get(n_embd, 4) if a.heads == 0 else a.heads
    model = GPT(Config(vocab_size=len(vocab), n_layer=n_layer, n_embd=n_embd, block_size=block, n_head=n_head))
    model.load_state_dict(state)
    print(json.dumps({"val_loss": val_loss(model, val, block)}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("data_dir")
    t.add_argument("--iters", type=int, default=2000)
    t.add_argument("--eval-every", type=int, default=250)
    t.add_argument("--batch", type=int, default=12)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--min-lr", type=float, default=1e-4)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--seed", type=int, default=1337, help="nanoGPT's; rank r draws from seed + r")
    t.add_argument("--fixed-windows", action="store_true",
                   help="draw all the run's windows up front and shuffle them, as ddp's recipe, not per batch")
    t.add_argument("--target", type=float, default=0.0, help="stop at the first evaluation at or below this loss")
    e = sub.add_parser("eval")
    e.add_argument("data_dir")
    e.add_argument("checkpoint")
    e.add_argument("--heads", type=int, default=0)
    a = p.parse_args()
    train(a) if a.command == "train" else evaluate(a)


if __name__ == "__main__":
    sys.exit(main())
