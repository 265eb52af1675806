"""Time-to-accuracy table of training runs: every *.json in DIR with the schema
of `ddp-train --json` and bench/fashion_peer.py ({"framework": "ddp" | "pytorch",
"world", "ddp", "config", "epochs": [...], "total_seconds"}); other JSON is skipped.
Usage: compare_train.py DIR [TARGET_ACC1 (default 0.90)]"""
import glob
import json
import os
import sys


def runs(out):
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and r.get("framework") and r.get("epochs") and "total_seconds" in r:
            yield os.path.basename(path), r


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out, target = sys.argv[1], float(sys.argv[2]) if len(sys.argv) == 3 else 0.90
    rows = sorted(runs(out), key=lambda fr: (fr[1]["framework"], fr[1]["world"], fr[1]["ddp"], fr[0]))
    print(f"| run | framework | world | ddp | threads/rank | epochs | final acc1 | train s to {100 * target:g}% acc1 | "
          f"total wall s | throughput (samples/s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        ep = r["epochs"]
        hit = next((e for e in ep if e["acc1"] >= target), None)
        reached = f"{hit['cumulative_train_seconds']:.1f} (epoch {hit['epoch']})" if hit else "not reached"
        train_s = sum(e["train_seconds"] for e in ep)
        samples = sum(e["throughput"] * e["train_seconds"] for e in ep)  # mean = all samples / all training time
        print(f"| {name} | {r['framework']} | {r['world']} | {'yes' if r['ddp'] else 'no'} | "
              f"{r.get('config', {}).get('threads_per_rank', '-')} | {len(ep)} | {100 * ep[-1]['acc1']:.2f}% | "
              f"{reached} | "
              f"{r['total_seconds']:.1f} | {samples / train_s if train_s > 0 else 0:.0f} |")


if __name__ == "__main__":
    main()
