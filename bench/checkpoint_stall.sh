#!/usr/bin/env bash
# What a checkpoint costs the steps around it: ddp-train shakespeare-char-gpu (nanoGPT's 10.7M-parameter GPT, AdamW:
# a 128 MB checkpoint) with a checkpoint every K steps, written in the background (--async-save, the default) and by
# every rank waiting for it (--no-async-save), in turns, on this machine in one run. From each run's timeline (rank
# 0): the median step without a save, the mean step that holds a save or overlaps its background write, the
# seconds each save adds to training (the sum over those steps of their excess over the median, per save), and the
# save's part at the step itself (gathering the state and copying it to host memory).
# usage: bench/checkpoint_stall.sh [BUILD_DIR [DATA_DIR [WORLD [ROUNDS]]]]
set -euo pipefail
build=${1:-build} data=${2:-../shared/data/tinyshakespeare} world=${3:-1} rounds=${4:-2}
out=${OUT:-/tmp/checkpoint_stall} batch=${BATCH:-2} steps=${STEPS:-80} every=${EVERY:-10}
python=${DDP_PYTHON:-python3}
rm -rf "$out" && mkdir -p "$out"
run() {  # NAME FLAGS...
  local name=$1
  shift
  OMP_NUM_THREADS=$((2 / world > 0 ? 2 / world : 1)) "$build/bin/ddprun" --nproc-per-node "$world" --standalone \
    "$build/bin/ddp-train" shakespeare-char-gpu --data-dir "$data" --backend gloo --precision fp32 --epochs 1 \
    --batch-size "$batch" --limit-train $((batch * world * steps)) --eval-every 0 --limit-test 2 --no-progress \
    --checkpoint-every "$every" --keep-last 2 --out-dir "$out/$name" --timeline "$out/$name.json" "$@" \
    > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
}
for r in $(seq "$rounds"); do
  run "async-$r"
  run "sync-$r" --no-async-save
done
"$python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def analyse(path):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    x = [e for e in ev if e.get("ph") == "X" and e.get("pid") == 0]
    ends = sorted(e["ts"] + e["dur"] for e in x if e["name"] == "optimizer step")
    saves = [(e["ts"], e["ts"] + e["dur"]) for e in x if e["name"] == "checkpoint"]
    writes = [(e["ts"], e["ts"] + e["dur"]) for e in x if e["name"] == "write"]
    steps = list(zip(ends, ends[1:]))
    hit = lambda a, b: any(s < b and t > a for s, t in saves + writes)
    plain = [b - a for a, b in steps if not hit(a, b)]
    during = [b - a for a, b in steps if hit(a, b)]
    med = statistics.median(plain)
    n = max(1, len(saves))
    return dict(median=med / 1e6, during=statistics.mean(during) / 1e6 if during else float("nan"),
                lost=sum(d - med for d in during) / n / 1e6, at_step=statistics.mean(t - s for s, t in saves) / 1e6,
                write=statistics.mean(t - s for s, t in writes) / 1e6 if writes else float("nan"), saves=len(saves))
print(f"{'run':10s} {'saves':>5s} {'step s':>7s} {'step w/ save s':>14s} {'lost/save s':>11s} {'at step s':>9s} {'bg write s':>10s}")
for r in range(1, rounds + 1):
    for mode in ("async", "sync"):
        a = analyse(f"{out}/{mode}-{r}.json")
        print(f"{mode}-{r:<4d} {a['saves']:5d} {a['median']:7.3f} {a['during']:14.3f} {a['lost']:11.3f} "
              f"{a['at_step']:9.3f} {a['write']:10.3f}")
PY
