#!/usr/bin/env bash
# SIGTERM (preemption) in the middle of training: every rank finishes its step, a checkpoint is written, the
# ranks exit with 75; --resume then reaches exactly the weights of an uninterrupted run.
# usage: preempt_test.sh DDPRUN DDP_TRAIN NPROC [BACKEND (default gloo)]
set -euo pipefail
ddprun=$1 train=$2 np=$3 backend=${4:-gloo}
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 16 --epochs 6 --data sampler)
# ddprun sends SIGTERM to each rank itself, under mpirun too (mpirun's own forwarding SIGKILLs them 2 s later).
"$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$train" "${args[@]}" --out-dir "$work/whole" > "$work/whole.log" 2>&1 ||
  { cat "$work/whole.log"; fail "the uninterrupted run"; }
# The same run, signalled after its second epoch line: ddprun forwards SIGTERM to every rank (--kill-grace 60: the
# save is never cut short by ddprun's SIGKILL on a loaded machine).
"$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" --kill-grace 60 "$train" "${args[@]}" --out-dir "$work/parts" > "$work/log" 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q "epoch 2/6" "$work/log" && break; sleep 0.1; done
kill -TERM $launcher
rc=0
wait $launcher || rc=$?
grep -q "preempted (SIGTERM): stopped after step " "$work/log" || { cat "$work/log"; fail "no preemption line (ddprun exit $rc)"; }
[ $rc = 75 ] || { cat "$work/log"; fail "ddprun exited with $rc, not 75 (preempted: the ranks saved and exited 75)"; }
grep -q "epoch 6/6" "$work/log" && fail "the signalled run trained to the end"
stopped=$(sed -n 's/.*stopped after step \([0-9]*\) of epoch.*/\1/p' "$work/log")
"$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$train" "${args[@]}" --out-dir "$work/parts" --resume > "$work/log2" 2>&1 ||
  { cat "$work/log2"; fail "the resumed run"; }
grep -q "resumed from .* step $stopped" "$work/log2" || { cat "$work/log2"; fail "did not resume at step $stopped"; }
${DDP_PYTHON:-/usr/bin/python3} "$here/same_weights.py" "$(latest "$work/whole")" "$(latest "$work/parts")" 6 \
  "after preemption and resume"
echo "preempt_test: stopped at step $stopped, resumed, equal"
