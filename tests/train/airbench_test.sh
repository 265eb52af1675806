#!/usr/bin/env bash
# cifar10-airbench's training mechanics on tiny data under ddprun: the whitening bias trains for the first 3
# epochs only; lookahead (--ema-every 1) leaves the model equal to its average after every step; the final
# evaluation runs with test-time augmentation; the checkpoint loads into Python.
# usage: airbench_test.sh DDPRUN DDP_TRAIN NPROC [FLAGS...] (e.g. --sync-bn)
set -euo pipefail
ddprun=$1 train=$2 np=$3 recipe=cifar10-airbench
shift 3
source "$(dirname "$0")/lib.sh"
"$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 5 --batch-size 16 \
  --limit-train 64 --limit-test 32 --ema-every 1 --keep-last 5 --out-dir "$work/out" --no-progress "$@" | tee "$work/log"
grep -q "^\[rank 0\] done: acc1 .* on 32 test samples after 5 epoch" "$work/log" || { echo "FAIL: no final line"; exit 1; }
case " $* " in *" --sync-bn "*) grep -q "(SyncBatchNorm)" "$work/log" || { echo "FAIL: --sync-bn did not convert"; exit 1; } ;; esac
${DDP_PYTHON:-/usr/bin/python3} - "$work/out/checkpoints" <<'PY'
import glob, sys, torch
paths = sorted(glob.glob(sys.argv[1] + "/checkpoint-e*.pt"))
assert len(paths) == 5, paths
ck = [torch.load(p) for p in paths]
bias = [c["model"]["whiten.bias"] for c in ck]
# Trained in epochs 1-3 (each moves it), frozen from epoch 4 on: lr 0, and the lookahead's average of the model
# with itself is exact (lerp), so it stays bit for bit.
assert not torch.equal(bias[0], bias[1]) and not torch.equal(bias[1], bias[2]), bias[:3]
assert torch.equal(bias[2], bias[3]) and torch.equal(bias[3], bias[4]), bias[2:]
for p, c in zip(paths, ck):
    assert set(c["ema"]) == set(c["model"]), p
    for k, v in c["model"].items():  # lookahead after every step: the model is the average, bit for bit
        assert torch.equal(v, c["ema"][k]), (p, k)
frozen = [k for k in ck[0]["model"] if k.endswith("norm1.weight") or k.endswith("norm2.weight")]
assert len(frozen) == 6 and all(torch.equal(ck[-1]["model"][k], torch.ones_like(ck[-1]["model"][k])) for k in frozen)
assert torch.equal(ck[0]["model"]["whiten.weight"], ck[-1]["model"]["whiten.weight"])  # frozen throughout
print("airbench ok: whitening bias frozen after epoch 3, model == lookahead average,", len(paths), "checkpoints")
PY
