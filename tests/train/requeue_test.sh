#!/usr/bin/env bash
# Slurm's warning before a time limit (sbatch --signal=USR1@90): SIGUSR1 to ddprun, passed on to the ranks, makes
# every rank finish its step, write a checkpoint and exit 75; with --requeue rank 0 then runs 'scontrol requeue
# $SLURM_JOB_ID' once (a stand-in scontrol on PATH records it); the requeued job (SLURM_RESTART_COUNT=1, no --resume)
# resumes and ends at exactly the weights of an uninterrupted run. SIGTERM (scancel, preemption) never requeues.
# usage: requeue_test.sh DDPRUN DDP_TRAIN NPROC
set -euo pipefail
ddprun=$1 train=$2 np=$3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; cat "$work/log" 2>/dev/null; exit 1; }
mkdir -p "$work/bin"
cat > "$work/bin/scontrol" <<SH
#!/bin/sh
echo "\$@" >> "$work/scontrol.log"
SH
chmod +x "$work/bin/scontrol"
export PATH="$work/bin:$PATH" SLURM_JOB_ID=4321
unset SLURM_RESTART_COUNT SLURM_PROCID SLURM_STEP_NUM_TASKS
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 16 --epochs 6 --data sampler --requeue)
cmd=("$ddprun" --nproc-per-node "$np" --standalone --backend gloo --kill-grace 60 "$train" "${args[@]}")
run() { "${cmd[@]}" "$@"; }
run --out-dir "$work/whole" > "$work/whole.log" 2>&1 || { cat "$work/whole.log"; fail "the uninterrupted run"; }
[ ! -e "$work/scontrol.log" ] || fail "an uninterrupted run requeued the job"
# signal SIG DIR: the run in DIR signalled after its second epoch line; its exit code in $rc, its output in
# $work/log (a log of its own first: the previous run's lines must not trigger the signal).
signal() {
  : > "$work/$1.log"
  "${cmd[@]}" --out-dir "$2" > "$work/$1.log" 2>&1 &  # ddprun itself, not a subshell, gets the signal
  local launcher=$!
  for _ in $(seq 600); do grep -q "epoch 2/6" "$work/$1.log" && break; sleep 0.1; done
  kill -"$1" $launcher
  rc=0
  wait $launcher || rc=$?
  cp "$work/$1.log" "$work/log"
}
signal TERM "$work/term"
[ $rc = 75 ] || { cat "$work/log"; fail "SIGTERM: ddprun exited with $rc, not 75"; }
[ ! -e "$work/scontrol.log" ] || { cat "$work/log"; fail "SIGTERM requeued the job: $(cat "$work/scontrol.log")"; }
signal USR1 "$work/parts"
grep -q "preempted (SIGUSR1): stopped after step " "$work/log" || { cat "$work/log"; fail "no preemption line (exit $rc)"; }
[ $rc = 75 ] || { cat "$work/log"; fail "SIGUSR1: ddprun exited with $rc, not 75"; }
grep -q "requeued the Slurm job: its next run resumes from " "$work/log" || { cat "$work/log"; fail "no requeue line"; }
[ "$(cat "$work/scontrol.log")" = "requeue 4321" ] || fail "scontrol was run as: $(cat "$work/scontrol.log")"
stopped=$(sed -n 's/.*stopped after step \([0-9]*\) of epoch.*/\1/p' "$work/log")
SLURM_RESTART_COUNT=1 run --out-dir "$work/parts" > "$work/log2" 2>&1 || { cat "$work/log2"; fail "the requeued run"; }
grep -q "requeue 1 by Slurm: resuming from the latest checkpoint" "$work/log2" || { cat "$work/log2"; fail "no requeue line"; }
grep -q "resumed from .* step $stopped" "$work/log2" || { cat "$work/log2"; fail "did not resume at step $stopped"; }
${DDP_PYTHON:-/usr/bin/python3} "$here/same_weights.py" "$(latest "$work/whole")" "$(latest "$work/parts")" 6 \
  "after the requeue"
echo "requeue_test: SIGUSR1 at step $stopped, requeued once, resumed, equal; SIGTERM did not requeue"
