"""Table of bench/ddp.sh results: best round per configuration; throughput
relative to our world-1 plain loop, and PyTorch's step time over ours;
then DDP's overhead at world 1 from the paired runs. w2-mpi-copies is
gradient_as_bucket_view off (PyTorch's default)."""
import glob
import json
import os
import sys


def best(out, model, who, config):
    runs = [json.load(open(f)) for f in glob.glob(os.path.join(out, f"{model}-{who}-{config}-[0-9]*.json"))]
    return min(runs, key=lambda r: r["ms_per_step"]) if runs else None


def main():
    out, models = sys.argv[1], sys.argv[2:]
    print(f"| model | config | ours ms/step | PyTorch ms/step | PyTorch/ours | ours throughput vs 1 plain | comm ms/step (exposed) |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        base = best(out, model, "ours", "w1-plain")
        for config in ["w1-plain", "w1-ddp", "w2-gloo", "w2-mpi", "w2-mpi-copies"]:
            ours, torch_ = best(out, model, "ours", config), best(out, model, "torch", config)
            if not ours:
                continue
            speed = (ours["world"] / ours["ms_per_step"]) / (1 / base["ms_per_step"])
            peer = f"{torch_['ms_per_step']:.3f}" if torch_ else "-"
            ratio = f"{torch_['ms_per_step'] / ours['ms_per_step']:.2f}x" if torch_ else "-"
            comm = (f"{ours.get('comm_ms_per_step', 0):.3f} ({ours.get('exposed_ms_per_step', 0):.3f})"
                    if config.startswith("w2") else "-")
            print(f"| {model} ({ours['params'] / 1e6:.2f}M) | {config} | {ours['ms_per_step']:.3f} | {peer} | {ratio} | "
                  f"{speed:.2f}x | {comm} |")
    print()
    print("DDP at world 1 against the plain loop, alternating in one process (ddp-bench ddp --pair), per round:")
    for model in models:
        runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, f"{model}-ours-w1-pair-[0-9]*.json")))]
        if runs:
            ratios = ", ".join(f"{r['ddp_ms_per_step'] / r['plain_ms_per_step']:.4f}" for r in runs)
            print(f"- {model}: DDP/plain {ratios}")


if __name__ == "__main__":
    main()
