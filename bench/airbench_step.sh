#!/usr/bin/env bash
# The airbench-shaped training step, ours (ddp-bench compute) beside PyTorch eager's (bench/compute_peer.py), on
# this CPU, 1 thread, per LibTorch line (our 1.13 build with Debian's python3-torch 1.13; our 2.x build with its
# venv's torch), ROUNDS rounds alternating ours and PyTorch's. Prints each round's rows (compare_compute.py) and
# the median step-time ratio per row. On a GPU, scripts/device-check.sh runs the same pair at batch 1024.
# Usage: bench/airbench_step.sh [ROUNDS] [BATCH]      e.g. bench/airbench_step.sh 3 64
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BATCH=${2:-64}
OUT=build/bench/airbench_step
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
TORCH2_BUILD=${TORCH2_BUILD:-build-torch2}
declare -A BIN=([1.13]=build/bin [2]=$TORCH2_BUILD/bin) PY=([1.13]=/usr/bin/python3 [2]=$TORCH2_BUILD/venv/bin/python)
A=(--models airbench --batch "$BATCH" --steps 6 --layouts nchw,nhwc --precisions fp32,bf16)
grep -m1 "model name" /proc/cpuinfo
for r in $(seq "$ROUNDS"); do
  for line in 1.13 2; do
    [ -x "${BIN[$line]}/ddp-bench" ] || { echo "airbench_step: ${BIN[$line]}/ddp-bench missing: build both lines" >&2; exit 1; }
    "${BIN[$line]}/ddp-bench" compute "${A[@]}" --gemm-n 512 --json "$OUT/ours-$line-$r.json" > /dev/null
    "${PY[$line]}" bench/compute_peer.py "${A[@]}" --json "$OUT/pytorch-$line-$r.json" > /dev/null
    echo "round $r, line $line:"
    "${PY[$line]}" bench/compare_compute.py "$OUT/ours-$line-$r.json" "$OUT/pytorch-$line-$r.json" | sed 's/^/  /'
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| line | layout, precision | ours / PyTorch samples/s (best round) | step ours/PyTorch (median) |")
print("|---|---|---|---|")
for line in ("1.13", "2"):
    rows = {}
    for r in range(1, rounds + 1):
        ours = json.load(open(f"{out}/ours-{line}-{r}.json"))["runs"]
        peer = {(x["layout"], x["precision"]): x["samples_per_s"] for x in json.load(open(f"{out}/pytorch-{line}-{r}.json"))["runs"]}
        for x in ours:
            rows.setdefault((x["layout"], x["precision"]), []).append((x["samples_per_s"], peer[(x["layout"], x["precision"])]))
    for (layout, precision), v in rows.items():
        print(f"| {line} | {layout}, {precision} | {max(a for a, _ in v):.0f} / {max(b for _, b in v):.0f} | "
              f"{statistics.median(b / a for a, b in v):.2f}x |")
PY
