#!/usr/bin/env bash
# The same job over gloo and over mpi reaches bit-identical weights (2 ranks:
# a sum of two gradients is exact in either order).
# usage: backend_test.sh DDPRUN DDP_TRAIN RECIPE [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3
shift 3
source "$(dirname "$0")/lib.sh"
for backend in gloo mpi; do
  "$ddprun" --nproc-per-node 2 --standalone --backend "$backend" "$train" "$recipe" "${data[@]}" \
    --epochs 1 --no-progress --out-dir "$work/$backend" "$@" | grep "on $backend" \
    || { echo "FAIL: the $backend run did not report its backend"; exit 1; }
done
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/gloo")" "$(latest "$work/mpi")" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a["step"] == b["step"] > 0
bad = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
if bad:
    print("FAIL: gloo and mpi differ in", bad)
    sys.exit(1)
print("gloo and mpi reach the same weights:", len(a["model"]), "tensors, step", a["step"])
PY
