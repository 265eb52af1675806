#!/usr/bin/env bash
# ddp-train --sync-bn: fashion-mnist trains with SyncBatchNorm on 3 ranks; the
# checkpoint keeps BatchNorm's names; a recipe without BatchNorm is refused.
# usage: sync_bn_test.sh DDPRUN DDP_TRAIN
set -euo pipefail
ddprun=$1 train=$2 recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
"$ddprun" --nproc-per-node 3 --standalone "$train" $recipe "${data[@]}" --epochs 1 --batch-size 16 --sync-bn \
  --out-dir "$work/out" --no-progress | tee "$work/log"
grep -qE "^\[rank 0\] ddp-train $recipe: .* batch 16 per rank \(SyncBatchNorm\), " "$work/log" ||
  { echo "FAIL: the first line does not say SyncBatchNorm"; exit 1; }
grep -q "^\[rank 0\] done: acc1" "$work/log" || { echo "FAIL: no final line"; exit 1; }
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/out")" <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
model = c["model"]
for k in ("bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked", "bn2.running_var"):
    assert k in model, (k, sorted(model))
# 192 samples / (3 ranks x 16) = 4 steps, one forward each in training.
assert int(model["bn1.num_batches_tracked"]) == c["step"] == 4, (model["bn1.num_batches_tracked"], c["step"])
assert c["config"]["sync_bn"] == "true", c["config"]
print("checkpoint ok: BatchNorm's names, step", c["step"])
PY
# A recipe without BatchNorm (resnet9's ghost batch norm is its own layer) is refused.
set +e
"$train" cifar10-resnet9 --data-dir "$work/data/cifar10" --limit-train 64 --sync-bn --out-dir "$work/r9" 2> "$work/err"
rc=$?
set -e
[ "$rc" != 0 ] && grep -qF -- "--sync-bn: the cifar10-resnet9 recipe's model has no BatchNorm layers" "$work/err" ||
  { echo "FAIL: cifar10-resnet9 --sync-bn: rc $rc, $(cat "$work/err")"; exit 1; }
echo "sync-bn ok"
