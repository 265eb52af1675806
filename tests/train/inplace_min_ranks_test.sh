#!/usr/bin/env bash
# ddprun --recovery inplace --min-ranks (issue 47): a loss that leaves fewer ranks than --min-ranks falls back to the
# restart path. ddprun says so, marks the rank lost and stops the others; they rebuild among themselves, see the
# stop and write the committed state (exit 75); --max-restarts starts every rank again, resumed at that very step
# (no completed step redone) with the launch world's global batch, and the run ends with every step.
# usage: inplace_min_ranks_test.sh DDPRUN DDP_TRAIN NPROC VICTIM
set -euo pipefail
ddprun=$1 train=$2 np=$3 victim=$4
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
epochs=6
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo)

# --kill-grace 60: the survivors rebuild, see the stop and save before ddprun's SIGKILL, however loaded the machine.
"$ddprun" --standalone --nproc-per-node "$np" --recovery inplace --min-ranks "$np" --max-restarts 1 \
  --monitor-interval 0.1 --kill-grace 60 "$train" "${args[@]}" --out-dir "$work/run" > "$work/log" 2>&1 &
kill_rank_in_epoch3 $! "$work/log" $epochs "$victim"
has() { grep -qE -- "$1" "$work/log" || { cat "$work/log"; fail "the output lacks: $1"; }; }
has "^ddprun: rank $victim was lost \(SIGKILL\) and $((np - 1)) rank\(s\) are left, fewer than --min-ranks $np: stopping the others \(--recovery inplace falls back to the restart path\)"
has "^ddprun: restarting every rank \(restart 1 of 1, --max-restarts 1\)"
# The survivors recovered in place, saw the stop at a later step boundary and saved there; the restart resumed at
# that very step.
step=$(grep -oE "in-place recovery: world $np -> $((np - 1)) .*going on from step [0-9]+" "$work/log" | grep -oE "[0-9]+$" |
  head -1)
[ -n "$step" ] || { cat "$work/log"; fail "the survivors did not recover in place before stopping"; }
saved=$(grep -oE "preempted \(SIGTERM\): stopped after step [0-9]+" "$work/log" | grep -oE "[0-9]+$" | head -1)
[ -n "$saved" ] && [ "$saved" -ge "$step" ] || { cat "$work/log"; fail "no save at or after step $step on the stop"; }
has "resumed from .* at epoch [0-9]+, step $saved$"
has "^ddprun: attempt 1 succeeded after 1 restart"
per_epoch=$(grep -oE "[0-9]+ steps per epoch" "$work/log" | head -1 | grep -oE "^[0-9]+")
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/run")" "$saved" $((per_epoch * epochs)) $epochs <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
if (c["step"], c["epoch"]) != (int(sys.argv[3]), int(sys.argv[4])):
    sys.exit("FAIL: the run ended at step %d, epoch %d; want step %s, epoch %s (every step)"
             % (c["step"], c["epoch"], sys.argv[3], sys.argv[4]))
print("the restart resumed at step %s (no completed step redone) and ended at step %d, epoch %d"
      % (sys.argv[2], c["step"], c["epoch"]))
PY
