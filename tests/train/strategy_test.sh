#!/usr/bin/env bash
# --strategy zero1 (ZeRO-1: the optimizer state sharded) reaches the weights and
# the optimizer state of --strategy ddp bit for bit: the same averaged gradients
# and elementwise updates, each parameter stepped by its owner and broadcast.
# Checkpoints hold the whole state either way: a run stopped after epoch 1 under
# one strategy and resumed under the other ends where the uninterrupted ddp run does.
# usage: strategy_test.sh DDPRUN DDP_TRAIN RECIPE NPROC [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4
shift 4
source "$(dirname "$0")/lib.sh"
run() { "$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 2 --no-progress "$@"; }
run --out-dir "$work/ddp" --strategy ddp "$@" | grep -q ", strategy ddp," || { echo "FAIL: ddp not named"; exit 1; }
run --out-dir "$work/zero1" --strategy zero1 "$@" | grep -q ", strategy zero1," || { echo "FAIL: zero1 not named"; exit 1; }
run --out-dir "$work/zero1-ddp" --strategy zero1 --stop-after 1 "$@" > /dev/null
run --out-dir "$work/zero1-ddp" --strategy ddp --resume "$@" > /dev/null
run --out-dir "$work/ddp-zero1" --strategy ddp --stop-after 1 "$@" > /dev/null
run --out-dir "$work/ddp-zero1" --strategy zero1 --resume "$@" > /dev/null
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/ddp")" "$(latest "$work/zero1")" "$(latest "$work/zero1-ddp")" \
  "$(latest "$work/ddp-zero1")" <<'PY'
import sys, torch
ref = torch.load(sys.argv[1])
assert ref["epoch"] == 2 and ref["step"] > 0, (ref["epoch"], ref["step"])
def same(a, b, where):
    if isinstance(a, torch.Tensor):
        if not torch.equal(a, b):
            print("FAIL:", where, "differs by", (a.double() - b.double()).abs().max().item())
            sys.exit(1)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (where, sorted(a.keys()), sorted(b.keys()))
        for k in a:
            same(a[k], b[k], where + "/" + str(k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, where + "/" + str(i))
    else:
        assert a == b, (where, a, b)
states = 0
for path in sys.argv[2:]:
    c = torch.load(path)
    assert c["step"] == ref["step"], (path, c["step"], ref["step"])
    same(ref["model"], c["model"], path + " model")
    same(ref["optimizer"]["state"], c["optimizer"]["state"], path + " optimizer state")
    same(ref["optimizer"]["param_groups"], c["optimizer"]["param_groups"], path + " param groups")
    states = len(c["optimizer"]["state"])
print("zero1, and resumes across strategies, equal ddp:", len(ref["model"]), "tensors,", states,
      "parameters' optimizer state, step", ref["step"])
PY
