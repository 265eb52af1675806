#!/usr/bin/env bash
# A run stopped after epoch 1 and resumed reaches exactly the weights of an
# uninterrupted run (same seed, world size and data).
# usage: resume_test.sh DDPRUN DDP_TRAIN RECIPE NPROC [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4
shift 4
source "$(dirname "$0")/lib.sh"
run() { "$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 2 --no-progress "$@"; }
run --out-dir "$work/whole" "$@"
run --out-dir "$work/parts" --stop-after 1 "$@"
run --out-dir "$work/parts" --resume "$@" | tee "$work/log"
grep -q "resumed from" "$work/log" || { echo "FAIL: the second part did not resume"; exit 1; }
stateful_hook=0
case " $* " in *powersgd*) stateful_hook=1 ;; esac
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/whole")" "$(latest "$work/parts")" "$stateful_hook" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
if sys.argv[3] == "1":  # the hook's per-rank state is in both and equal
    ha, hb = a["comm_hook"], b["comm_hook"]
    assert ha["spec"] == hb["spec"] and len(ha["ranks"]) == len(hb["ranks"]), (ha["spec"], hb["spec"])
    for r, (x, y) in enumerate(zip(ha["ranks"], hb["ranks"])):
        assert x["iter"] == y["iter"] > 0 and torch.equal(x["rng"], y["rng"]), r
        for key in ("error", "p", "q"):
            assert x[key].keys() == y[key].keys() and len(x[key]) > 0, (r, key)
            for k in x[key]:
                assert torch.equal(x[key][k], y[key][k]), ("FAIL: comm hook state", r, key, k)
    print("comm hook state equal on", len(ha["ranks"]), "ranks")
assert a["step"] == b["step"] and a["epoch"] == b["epoch"] == 2, (a["step"], b["step"])
# DDP's rebuilt buckets: kept by the checkpoint, and the resumed run reduced in the same ones.
order = a["ddp_bucket_order"]
assert sorted(order) == list(range(len(order))) and len(order) > 0, order
assert b["ddp_bucket_order"] == order, ("FAIL: bucket order", order, b["ddp_bucket_order"])
# The training device's generator (a GPU's draws its dropout): kept, and where the resumed run left it.
assert a["device_rng"]["device"] == b["device_rng"]["device"], (a["device_rng"]["device"], b["device_rng"]["device"])
for r, (x, y) in enumerate(zip(a["device_rng"]["states"], b["device_rng"]["states"])):
    assert torch.equal(x, y), ("FAIL: device generator of rank", r, a["device_rng"]["device"])
for part in ("model", "ema"):
    if part not in a:
        continue
    for k in a[part]:
        if not torch.equal(a[part][k], b[part][k]):
            print("FAIL:", part, k, "differs by", (a[part][k].double() - b[part][k].double()).abs().max().item())
            sys.exit(1)
print("resumed run equals the uninterrupted one:", len(a["model"]), "tensors, step", a["step"])
PY
