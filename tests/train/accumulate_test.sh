#!/usr/bin/env bash
# Gradient accumulation through no_sync: 2 micro-batches of 8 per step reach the
# weights of plain steps of 16 (the course MLP has no batch statistics and no
# dropout; the two differ only by the order of float32 sums, amplified by 4 steps).
# The tolerance is not a number tuned on one CPU: it is the gap between two other
# correct computations of the same training in the same run, on the same kernels:
# world NP with batch 16 and world 1 with batch 16*NP (the DistributedSampler deals
# the same global batches), whose sums are grouped differently too. Accumulation
# may differ from plain by at most 10x that reference gap, per tensor (rounding
# gaps of such regroupings are of one order of magnitude; a floor of 4 float32
# ulps of the tensor's largest weight covers a reference that happens to be exact). What it guards against,
# a micro-batch lost or scaled wrongly, moves the weights by the size of an
# update: the half-step run below must lie 100x beyond the tolerance.
# usage: accumulate_test.sh DDPRUN DDP_TRAIN NPROC
set -euo pipefail
ddprun=$1 train=$2 np=$3 recipe=mlp
source "$(dirname "$0")/lib.sh"
run() { local n=$1; shift; "$ddprun" --nproc-per-node "$n" --standalone "$train" mlp --epochs 1 \
          --limit-train $((np * 16 * 4)) --limit-test 64 --no-progress --data sampler "$@" > /dev/null; }
run "$np" --batch-size 16 --out-dir "$work/plain"
run "$np" --batch-size 8 --accumulate 2 --out-dir "$work/accumulated"
run 1 --batch-size $((np * 16)) --out-dir "$work/world1"
run "$np" --batch-size 16 --lr 0.05 --out-dir "$work/half"
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/plain")" "$(latest "$work/accumulated")" "$(latest "$work/world1")" \
  "$(latest "$work/half")" <<'PY'
import sys, torch
plain, acc, world1, half = (torch.load(p)["model"] for p in sys.argv[1:5])
assert all(torch.load(p)["step"] == 4 for p in sys.argv[1:5])
worst = 0.0
gap = lambda a, b: (a - b).abs().max().item()
for k, w in plain.items():
    big = w.abs().max()
    ulp = (torch.nextafter(big, torch.tensor(float("inf"))) - big).item()
    tol = max(10 * gap(w, world1[k]), 4 * ulp)
    ratio = gap(w, acc[k]) / tol
    worst = max(worst, ratio)
    print("%-16s plain-accumulated %.3g  plain-world1 %.3g  tolerance %.3g  plain-half %.3g" %
          (k, gap(w, acc[k]), gap(w, world1[k]), tol, gap(w, half[k])))
    assert ratio <= 1, (k, "accumulated differs from plain by %.3g tolerances" % ratio)
    assert gap(w, half[k]) > 100 * tol, (k, "the half-step run is within 100 tolerances: the check could not tell")
print("accumulated steps equal plain steps: worst gap %.3g of the tolerance" % worst)
PY
