#!/usr/bin/env bash
# Does PowerSGD's second reduction overlap backward? ddp-bench ddp with the PowerSGD hook at world 2 (gloo and
# mpi, 1 thread per rank), continuations run by the group's sequencer (the default) against run on the first
# waiter (DDP_CONTINUATIONS=waiter, the behaviour before), rounds alternating; the best round counts. From each
# run's timeline: how many continuations (P's orthogonalization and Q's all_reduce, track "continuations") started
# while backward was still computing gradients on the same rank (before the reducer waits for the buckets).
# Usage: bench/powersgd_overlap.sh [models] [steps] [rounds] [hook]
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-"wide cnn"}
STEPS=${2:-60}
ROUNDS=${3:-2}
HOOK=${4:-powersgd:rank=4,start=2}
BIN=${BIN:-build/bin}
OUT=build/bench/powersgd_overlap
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
grep -m1 "model name" /proc/cpuinfo
for round in $(seq "$ROUNDS"); do
  for model in $MODELS; do
    for backend in gloo mpi; do
      for mode in sequencer waiter; do
        tag="$OUT/$model-$backend-$mode-$round"
        DDP_CONTINUATIONS=$mode "$BIN/ddprun" --nproc-per-node 2 --standalone --backend $backend "$BIN/ddp-bench" ddp \
          --model $model --backend $backend --steps "$STEPS" --warmup 10 --comm-hook "$HOOK" --timeline "$tag.trace.json" \
          --json "$tag.json" > "$tag.log" 2>&1
      done
    done
  done
done
${DDP_PYTHON:-/usr/bin/python3} - "$OUT" "$MODELS" <<'PY'
import glob, json, sys
out, models = sys.argv[1], sys.argv[2].split()
def overlap(trace):
    events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    total = during = 0
    for rank in {e["pid"] for e in events}:
        # backward's own computation: from its start to where the reducer starts waiting for the buckets
        waits = sorted(e["ts"] for e in events if e["pid"] == rank and e["name"] == "wait for buckets")
        bwd = []
        for e in events:
            if e["pid"] == rank and e["name"] == "backward":
                end = next((w for w in waits if e["ts"] <= w <= e["ts"] + e["dur"]), e["ts"] + e["dur"])
                bwd.append((e["ts"], end))
        for e in events:
            if e["pid"] != rank or e.get("cat") != "continuations" or e["name"] != "then":
                continue
            total += 1
            during += any(a <= e["ts"] < b for a, b in bwd)
    return during, total
print("| model | backend | continuations | ms/step (best round) | exposed comm, ms/step | continuations started while backward computes |")
print("|---|---|---|---|---|---|")
for model in models:
    for backend in ("gloo", "mpi"):
        for mode in ("sequencer", "waiter"):
            runs = sorted(glob.glob(f"{out}/{model}-{backend}-{mode}-*.json"))
            runs = [r for r in runs if ".trace" not in r]
            if not runs:
                continue
            docs = [json.load(open(r)) for r in runs]
            best = min(docs, key=lambda d: d["ms_per_step"])
            d = t = 0
            for r in runs:
                a, b = overlap(r.replace(".json", ".trace.json"))
                d, t = d + a, t + b
            what = "by themselves (sequencer)" if mode == "sequencer" else "on the first waiter"
            print(f"| {model} | {backend} | {what} | {best['ms_per_step']:.2f} | {best['exposed_ms_per_step']:.2f} | {d} of {t} |")
PY
