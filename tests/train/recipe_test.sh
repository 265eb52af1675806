#!/usr/bin/env bash
# A recipe trains one short epoch on tiny generated data under ddprun, then
# leaves its logs and a checkpoint that Python's torch.load reads.
# usage: recipe_test.sh DDPRUN DDP_TRAIN RECIPE NPROC [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/make_tiny_data.py" "$work/data"
case $recipe in
  fashion-mnist) data=(--data-dir "$work/data/fashion") ;;
  cifar10-*) data=(--data-dir "$work/data/cifar10") ;;
  *) data=() ;;
esac
"$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 1 \
  --out-dir "$work/out" --no-progress "$@" | tee "$work/log"
grep -q "^\[rank 0\] done: acc1" "$work/log" || { echo "FAIL: no final line"; exit 1; }
ls "$work"/out/tb/events.out.tfevents.* > /dev/null
test -s "$work/out/metrics.jsonl"
ckpt=$(cat "$work/out/checkpoints/latest")
case $ckpt in /*) ;; *) ckpt="$work/out/checkpoints/$ckpt" ;; esac
/usr/bin/python3 - "$ckpt" <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
assert c["epoch"] == 1 and c["step"] > 0, (c["epoch"], c["step"])
model = c["model"]
assert all(torch.is_tensor(v) for v in model.values()) and len(model) > 0
assert not any(k.startswith("module.") for k in model)
print("checkpoint ok:", len(model), "tensors, step", c["step"])
PY
