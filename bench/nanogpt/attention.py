#!/usr/bin/env python3
"""Causal attention on a CPU: torch's fused kernel (F.scaled_dot_product_attention, flash) against the composition
ddp uses below its bound (ddp::compat::fused_attention): one batched GEMM adding the causal mask to q k^T / sqrt(D),
a softmax, a batched GEMM with v. Two measures, each A B A B in one run:
  kernel: forward and backward of the attention alone, for shapes of nanoGPT's two configurations and longer ones;
  step:   a whole training step (forward, backward, AdamW) of nanoGPT's CPU configuration (nanogpt.py's model),
          with F.scaled_dot_product_attention replaced by the composition in the B runs.
usage: OMP_NUM_THREADS=2 attention.py [--threads 2] [--rounds 2]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt as ng  # noqa: E402

fused = F.scaled_dot_product_attention


def composition(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True, **_):
    b, h, t, d = q.shape
    mask = torch.full((t, t), float("-inf"), dtype=q.dtype).triu(1)
    att = torch.baddbmm(mask, q.reshape(b * h, t, d), k.reshape(b * h, t, d).transpose(1, 2), alpha=d ** -0.5)
    return torch.bmm(F.softmax(att, -1), v.reshape(b * h, t, d)).view(b, h, t, d)


def timed(fn, n):
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3


def kernels(rounds):
    for b, h, t, d in ((12, 4, 64, 32), (12, 4, 128, 32), (64, 6, 256, 64), (8, 6, 512, 64), (4, 8, 1024, 64)):
        for dtype in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(b, t, h, d, dtype=dtype).transpose(1, 2).requires_grad_() for _ in range(3))
            n = max(3, int(3e8 / (b * h * t * t * d)))
            ms = {"fused": [], "composition": []}
            for _ in range(rounds):
                for name, f in (("fused", lambda: fused(q, k, v, is_causal=True)), ("composition",
                                                                                       lambda: composition(q, k, v))):
                    ms[name].append(timed(lambda: f().backward(torch.ones(b, h, t, d, dtype=dtype)), n))
            a, c = min(ms["fused"]), min(ms["composition"])
            print(f"kernel B {b:2d} H {h} T {t:4d} D {d} {str(dtype)[6:]:8s}: fused {a:8.2f} ms  composition "
                  f"{c:8.2f} ms  fused/composition {a / c:5.2f}", flush=True)


def steps(rounds):
    text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/data/tinyshakespeare")
    vocab, data, _ = ng.load_text(os.environ.get("DATA_DIR", text))
    for dtype in ("fp32", "bf16"):
        torch.manual_seed(1337)
        c = ng.Config(vocab_size=len(vocab))
        model = ng.GPT(c)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")

        def step():
            ix = torch.randint(len(data) - c.block_size, (12,))
            x = torch.stack([data[i : i + c.block_size] for i in ix])
            y = torch.stack([data[i + 1 : i + 1 + c.block_size] for i in ix])
            with cast:
                _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        ms = {"fused": [], "composition": []}
        for _ in range(rounds):
            for name, f in (("fused", fused), ("composition", composition)):
                F.scaled_dot_product_attention = f
                ms[name].append(timed(step, 60))
        F.scaled_dot_product_attention = fused
        a, c = sorted(ms["fused"])[len(ms["fused"]) // 2], sorted(ms["composition"])[len(ms["composition"]) // 2]
        print(f"step nanoGPT CPU configuration {dtype}: fused {a:6.1f} ms  composition {c:6.1f} ms  "
              f"fused/composition {a / c:5.2f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"cpu capability {torch.backends.cpu.get_cpu_capability()}, {a.threads} threads, torch {torch.__version__}")
    kernels(a.rounds)
    steps(a.rounds)


if __name__ == "__main__":
    main()
