#!/usr/bin/env bash
# Time to 90% on Fashion-MNIST, world 2, 1 thread per rank: the demo's job
# (ddp-train fashion-mnist-fast) beside PyTorch's Python DDP (bench/fashion_peer.py,
# FashionCNN) at its best settings, and our FashionCNN at the peer's settings,
# one after the other in one run. "to 90%" is wall time from the launch to the
# end of the first evaluation at >= 90% top-1 on the 10,000 test images.
# Usage: bench/fashion_fast.sh [BIN_DIR] [SEEDS]     e.g. bench/fashion_fast.sh build/bin "0 1 2"
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/bin}
SEEDS=${2:-0}
OUT=build/bench/fashion_fast
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=${DDP_PYTHON:-/usr/bin/python3}  # the peer: python3-torch 1.13, or a torch 2.x venv
run="$BIN/ddprun --nproc-per-node 2 --standalone"
# name | command (ours write metrics.jsonl under --out-dir; the peer writes --json). Each seed: the demo's job
# and the peer's best (per-epoch evaluation); seed 0 also: our FashionCNN at the peer's settings, and the
# peer evaluating every eighth of an epoch as the demo does (which costs it more than it gains).
jobs=()
for s in $SEEDS; do
  jobs+=("ours: fashion-mnist-fast (the demo), seed $s|$run $BIN/ddp-train fashion-mnist-fast --seed $s --no-progress --out-dir OUT")
  jobs+=("PyTorch DDP: --epochs 2 --batch-size 128, seed $s|$run $PY bench/fashion_peer.py --epochs 2 --batch-size 128 --seed $s --json OUT.json")
done
jobs+=(
  "ours: fashion-mnist (FashionCNN) --epochs 2 --batch-size 128 --eval-every 29|$run $BIN/ddp-train fashion-mnist --epochs 2 --batch-size 128 --eval-every 29 --no-progress --out-dir OUT"
  "PyTorch DDP: --epochs 2 --batch-size 128 --eval-every 29|$run $PY bench/fashion_peer.py --epochs 2 --batch-size 128 --eval-every 29 --json OUT.json"
  "PyTorch DDP: --epochs 2 --eval-every 58|$run $PY bench/fashion_peer.py --epochs 2 --eval-every 58 --json OUT.json"
)
for i in "${!jobs[@]}"; do
  name=${jobs[$i]%%|*}
  dir="$OUT/j$i"
  cmd=${jobs[$i]#*|}
  cmd=${cmd//OUT/$dir}
  start=$(date +%s.%N)
  $cmd > "$dir.log" 2>&1 || { echo "failed: $name (log: $dir.log)"; tail -5 "$dir.log"; exit 1; }
  end=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$name" "$dir" "$start" "$end" >> "$OUT/runs.tsv"
done
$PY bench/time_to_accuracy.py "$OUT/runs.tsv" --target 0.90
