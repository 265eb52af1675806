"""Ours against PyTorch's, row by row: `ddp-bench compute --json OURS` and `bench/compute_peer.py --json PEER` on the
same device, models, batch, layouts and precisions. Prints one line per row: samples/s of each, PyTorch's with a
CUDA graph where it has one, and the ratio of step times ours / PyTorch eager (below 1: ours is faster).
  python3 bench/compare_compute.py ours.json pytorch.json"""
import json
import os
import sys


def same_device(name):
    """A device as torch names it, with its index: 'cuda' is the current one, cuda:0 where a run sees one GPU."""
    return name + ":0" if name == "cuda" else name


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_compute.py OURS.json PYTORCH.json")
    missing = [f for f in sys.argv[1:] if not os.path.exists(f)]
    if missing:
        sys.exit(f"compare_compute.py: no results in {', '.join(missing)} (that run failed)")
    ours, peer = (json.load(open(f)) for f in sys.argv[1:])
    if same_device(ours["device"]) != same_device(peer["device"]) or ours["batch"] != peer["batch"]:
        sys.exit(f"compare_compute.py: not the same runs: {ours['device']} batch {ours['batch']} against "
                 f"{peer['device']} batch {peer['batch']}")
    rates, errors = {}, {}
    for r in peer["runs"]:
        key = (r["model"], r["layout"], r["precision"], r.get("cuda_graph", False))
        rates[key] = r["samples_per_s"]
        if r.get("error"):
            errors[key] = r["error"]
    for r in ours["runs"]:
        key = (r["model"], r["layout"], r["precision"])
        eager, graph = rates.get(key + (False,)), rates.get(key + (True,))
        line = f"{' '.join(key)}: ours {r['samples_per_s']:.0f}/s"
        if eager:
            line += f", pytorch eager {eager:.0f}/s, step ours/pytorch {eager / r['samples_per_s']:.2f}x"
        else:
            line += ", pytorch: no such row"
        if graph:
            line += f", pytorch CUDA graph {graph:.0f}/s ({graph / eager:.2f}x its eager)" if eager else f", graph {graph:.0f}/s"
        elif key + (True,) in errors:
            line += f", pytorch CUDA graph failed ({errors[key + (True,)]})"
        print(line + ";")


if __name__ == "__main__":
    main()
