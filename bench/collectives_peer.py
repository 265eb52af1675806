"""PyTorch's own collectives (python3-torch, gloo), timed exactly like
`ddp-bench collectives`: same sizes, iteration counts and bandwidth formulas.
Run with: build/bin/ddprun --nproc-per-node 2 --standalone /usr/bin/python3 bench/collectives_peer.py --json out.json
Gloo in PyTorch 1.13 has no reduce_scatter, so that op is skipped."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def iterations(nbytes):
    return max(5, min(200, (1 << 26) // nbytes))


def bus_factor(op, w):
    return {"all_reduce": 2.0 * (w - 1) / w, "broadcast": 1.0}.get(op, (w - 1) / w)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", type=int, default=4)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--ops", default="all_reduce,all_gather,broadcast")
    p.add_argument("--json", default="")
    a = p.parse_args()
    dist.init_process_group("gloo")
    w, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for op in a.ops.split(","):
        nbytes = a.min_bytes
        while nbytes <= a.max_bytes:
            count = nbytes // 4
            if count < w or (op == "all_gather" and count % w):
                nbytes *= 2
                continue
            out = torch.ones(count)
            parts = list(out.chunk(w))
            inp = torch.ones(count // w)

            def once():
                if op == "all_reduce":
                    dist.all_reduce(out)
                elif op == "broadcast":
                    dist.broadcast(out, 0)
                else:
                    dist.all_gather(parts, inp)

            iters = iterations(nbytes)
            once()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                once()
            us = torch.tensor([(time.perf_counter() - t0) * 1e6 / iters], dtype=torch.float64)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)
            us = us.item()
            algbw = nbytes / us / 1e3
            rows.append(dict(op=op, bytes=nbytes, time_us=us, algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(op, w)))
            nbytes *= 2
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(dict(tool="pytorch gloo", backend="gloo", world=w, dtype="float32", results=rows), f, indent=1)
    # PyTorch 1.13's gloo teardown can spin forever once the peer has exited:
    # meet at a barrier, then leave without it.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
