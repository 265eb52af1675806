#!/usr/bin/env bash
# Time to accuracy on Fashion-MNIST: ddp-train fashion-mnist beside PyTorch's
# Python DDP (bench/fashion_peer.py: same model, batch, optimizer, schedule
# and epochs), at world 1 and 2, 1 thread per rank, in one run.
# Usage: bench/train.sh [epochs] [worlds]     e.g. bench/train.sh 3 "1 2"
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-3}
WORLDS=${2:-"1 2"}
OUT=build/bench/train
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=${DDP_PYTHON:-/usr/bin/python3}  # the peer: python3-torch 1.13, or a torch 2.x venv
for w in $WORLDS; do
  run="build/bin/ddprun --nproc-per-node $w --standalone"
  start=$(date +%s.%N)
  $run build/bin/ddp-train fashion-mnist --epochs "$EPOCHS" --out-dir "$OUT/ours-w$w" --no-progress | tail -3
  end=$(date +%s.%N)
  # Our metrics.jsonl -> the peer's JSON schema (compare_train.py reads both).
  $PY - "$OUT/ours-w$w/metrics.jsonl" "$OUT/ours-w$w.json" "$w" "$start" "$end" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs, cum = [], 0.0
for l in lines:
    if l.get("kind") != "epoch":
        continue
    cum += l["train_seconds"]
    epochs.append({"epoch": int(l["epoch"]), "train_seconds": l["train_seconds"], "cumulative_train_seconds": cum,
                   "acc1": l["acc1/val"], "acc5": l["acc5/val"], "val_loss": l["Loss/val"], "throughput": l["throughput"]})
json.dump({"framework": "ddp", "world": int(sys.argv[3]), "ddp": True, "config": {"threads_per_rank": 1},
           "epochs": epochs, "total_seconds": float(sys.argv[5]) - float(sys.argv[4])}, open(sys.argv[2], "w"), indent=1)
PY
  $run $PY bench/fashion_peer.py --epochs "$EPOCHS" --json "$OUT/pytorch-w$w.json" | tail -1
done
$PY bench/compare_train.py "$OUT"
