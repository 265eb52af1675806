"""Time to accuracy of launched runs, one table: each line of RUNS (tab-separated: name, run dir or JSON prefix,
launch unix time, end unix time) is one of ours (DIR/metrics.jsonl: ddp-train's evaluations) or PyTorch's peer
(DIR.json: bench/fashion_peer.py's). "to X%" is wall time from the launch to the end of the first evaluation
at >= X% top-1.
  python3 bench/time_to_accuracy.py runs.tsv --target 0.91"""
import argparse
import json
import os


def evaluations(d):
    if os.path.exists(d + ".json"):  # the peer
        return [(e["epoch"], e["acc1"], e["unix_time"]) for e in json.load(open(d + ".json"))["evals"]]
    if not os.path.exists(d + "/metrics.jsonl"):
        return []  # the run failed before its first evaluation
    rows = [json.loads(line) for line in open(d + "/metrics.jsonl")]
    return [(r["epoch"], r["acc1/val"], r["unix_time"]) for r in rows if r.get("kind") in ("eval", "epoch")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs")
    p.add_argument("--target", type=float, default=0.90, help="top-1 accuracy, a fraction")
    a = p.parse_args()
    pct = f"{100 * a.target:g}%"
    print(f"| run | first evaluation >= {pct} (epoch) | acc1 then | wall s to {pct} | final acc1 | wall s in all |")
    print("|---|---|---|---|---|---|")
    for line in open(a.runs):
        name, d, start, end = line.rstrip("\n").split("\t")
        start, end = float(start), float(end)
        evals = evaluations(d)
        hit = next((e for e in evals if e[1] >= a.target), None)
        cross = f"{hit[0]:.2f} | {100 * hit[1]:.2f}% | **{hit[2] - start:.1f}**" if hit else "none | | -"
        final = f"{100 * evals[-1][1]:.2f}%" if evals else "no evaluation"
        print(f"| {name} | {cross} | {final} | {end - start:.1f} |")


if __name__ == "__main__":
    main()
