#!/usr/bin/env bash
# ddp-train's timeline under ddprun: the merged Chrome trace holds every rank's
# steps and bucket reductions (timeline_check), with --timeline FILE (ddp-train
# joins the files) or with DDP_TIMELINE=FILE (ddprun joins them at the end).
# usage: timeline_test.sh DDPRUN DDP_TRAIN CHECK NPROC flag|env [ddprun flags...]
set -euo pipefail
ddprun=$1 train=$2 check=$3 np=$4 how=$5 recipe=mlp
shift 5
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
unset DDP_TIMELINE
args=(mlp --epochs 1 --limit-train $((np * 64 * 4)) --limit-test 64 --batch-size 64 --no-progress --out-dir "$work/out")
if [ "$how" = flag ]; then
  "$ddprun" --nproc-per-node "$np" --standalone "$@" "$train" "${args[@]}" --timeline "$work/t.json" > "$work/log" 2>&1 ||
    fail "ddprun exited with $?"
  grep -q "^\[rank 0\] timeline: $work/t.json ($np of $np rank(s);" "$work/log" || fail "no timeline line from ddp-train"
else
  DDP_TIMELINE="$work/t.json" "$ddprun" --nproc-per-node "$np" --standalone "$@" "$train" "${args[@]}" > "$work/log" 2>&1 ||
    fail "ddprun exited with $?"
  grep -q "^ddprun: timeline: $work/t.json ($np rank(s))$" "$work/log" || fail "no timeline line from ddprun"
fi
for r in $(seq 0 $((np - 1))); do [ -s "$work/t.rank$r.json" ] || fail "no rank file t.rank$r.json"; done
# The steps and the gradient bytes per step, from the checkpoint (the MLP's tensors are all parameters).
read -r steps bytes < <(${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/out")" <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
print(c["step"], sum(v.numel() * v.element_size() for v in c["model"].values()))
PY
)
[ "$steps" = 4 ] || fail "expected 4 steps, the checkpoint says $steps"
[ "$np" = 1 ] && bytes=0  # DDP in a world of one reduces nothing: no bucket events
"$check" "$work/t.json" "$np" "$steps" "$bytes"
