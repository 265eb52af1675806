#!/usr/bin/env bash
# cifar10-airbench at world 2, one run per seed, each timed from launch to exit (the
# docs/benchmarks.md table "CIFAR-10 to 94%"). Prints a markdown row per seed and the mean.
# Usage: bench/cifar_airbench.sh [seeds] [extra ddp-train flags...]   e.g. bench/cifar_airbench.sh "0 1 2"
set -euo pipefail
cd "$(dirname "$0")/.."
# CIFAR-10: CIFAR_DIR, else the course's copy (the recipe's own default is $DDP_DATA_DIR/cifar10, else ~/.cache/ddp).
CIFAR_DIR=${CIFAR_DIR:-../shared/data/cifar10}
SEEDS=${1:-"0 1 2"}
shift || true
OUT=${OUT:-build/bench/airbench}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
grep -m1 "model name" /proc/cpuinfo
echo "| seed | acc1 (6-view TTA) | acc1 after each epoch (plain) | train s | wall s |"
echo "|---|---|---|---|---|"
for s in $SEEDS; do
  rm -rf "$OUT/seed$s"
  start=$(date +%s.%N)
  build/bin/ddprun --nproc-per-node 2 --standalone build/bin/ddp-train cifar10-airbench --seed "$s" \
    --out-dir "$OUT/seed$s" --data-dir "$CIFAR_DIR" --no-progress "$@" > "$OUT/seed$s.log" 2>&1
  end=$(date +%s.%N)
  ${DDP_PYTHON:-/usr/bin/python3} - "$OUT/seed$s/metrics.jsonl" "$s" "$start" "$end" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ep = [l for l in lines if l.get("kind") == "epoch"]
accs = ", ".join(f"{100 * l['acc1/val']:.2f}" for l in ep[:-1])
train = sum(l["train_seconds"] for l in ep)
print(f"| {sys.argv[2]} | **{100 * ep[-1]['acc1/val']:.2f}%** | {accs} | {train:.0f} | {float(sys.argv[4]) - float(sys.argv[3]):.0f} |")
PY
done
