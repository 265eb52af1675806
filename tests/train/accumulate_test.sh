#!/usr/bin/env bash
# Gradient accumulation through no_sync: 2 micro-batches of 8 per step reach the
# weights of plain steps of 16 (the course MLP has no batch statistics; the sums
# differ only by rounding). 4 steps: at lr 0.1 this MLP amplifies rounding
# differences about 10x a step, so longer runs drift apart legitimately.
# usage: accumulate_test.sh DDPRUN DDP_TRAIN NPROC
set -euo pipefail
ddprun=$1 train=$2 np=$3 recipe=mlp
source "$(dirname "$0")/lib.sh"
run() { "$ddprun" --nproc-per-node "$np" --standalone "$train" mlp --epochs 1 --limit-train $((np * 16 * 4)) --limit-test 64 \
          --no-progress --data sampler "$@" > /dev/null; }
run --batch-size 16 --out-dir "$work/plain"
run --batch-size 8 --accumulate 2 --out-dir "$work/accumulated"
run --batch-size 16 --lr 0.05 --out-dir "$work/half"
/usr/bin/python3 - "$(latest "$work/plain")" "$(latest "$work/accumulated")" "$(latest "$work/half")" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a["step"] == b["step"] == 4, (a["step"], b["step"])
for k in a["model"]:
    d = (a["model"][k] - b["model"][k]).abs().max().item()
    assert torch.allclose(a["model"][k], b["model"][k], rtol=1.3e-6, atol=5e-5), (k, d)
# The tolerance can tell: half the step (what dropping one micro-batch's gradient looks like) is far outside it.
h = torch.load(sys.argv[3])
gap = max((a["model"][k] - h["model"][k]).abs().max().item() for k in a["model"])
assert gap > 20 * 5e-5, ("half-step run too close to tell apart", gap)
print("accumulated steps equal plain steps:", a["step"], "steps")
PY
