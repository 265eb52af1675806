#!/usr/bin/env bash
# Ranks started as srun starts them (each with Slurm's variables only: no RANK, WORLD_SIZE or MASTER_ADDR) train
# together over gloo: rank, world, local rank, the store's host (the first of SLURM_STEP_NODELIST) and port
# (15000 + SLURM_JOB_ID's last four digits) from Slurm, said on the first lines. Without Slurm: the variables are
# made here as srun makes them for one node. (Under a real slurmctld: slurm_test.sh.)
# usage: srun_env_test.sh DDP_TRAIN NP
set -euo pipefail
train=$1 np=$2 recipe=mlp
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; for f in "$work"/rank*.log; do echo "== $f"; cat "$f"; done; exit 1; }
job=$(${DDP_PYTHON:-/usr/bin/python3} "$(dirname "$0")/slurm_free_job.py") || fail "no free port in [15000, 24999]"
port=$((15000 + job % 10000))
unset_launcher_env
pids=()
for ((r = 0; r < np; r++)); do
  SLURM_JOB_ID=$job SLURM_PROCID=$r SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_NTASKS=$np SLURM_STEP_NUM_TASKS=$np \
    SLURM_STEP_NUM_NODES=1 SLURM_STEP_TASKS_PER_NODE=$np SLURM_STEP_NODELIST=127.0.0.1 SLURM_JOB_NODELIST=127.0.0.1 \
    DDP_TIMEOUT=120 OMP_NUM_THREADS=1 timeout 600 "$train" mlp --limit-train 384 --limit-test 64 --epochs 1 \
    --no-progress --out-dir "$work/out" > "$work/rank$r.log" 2>&1 &
  pids+=($!)
done
for ((r = 0; r < np; r++)); do wait "${pids[$r]}" || fail "rank $r exited with $?"; done
grep -q "ddp-train mlp: $np rank(s) on gloo" "$work/rank0.log" || fail "rank 0's first line"
want="placed by srun: RANK from SLURM_PROCID, WORLD_SIZE from SLURM_STEP_NUM_TASKS, LOCAL_RANK from SLURM_LOCALID, \
LOCAL_WORLD_SIZE $np (this node's entry of SLURM_STEP_TASKS_PER_NODE), GROUP_RANK from SLURM_NODEID, GROUP_WORLD_SIZE \
from SLURM_STEP_NUM_NODES, MASTER_ADDR 127.0.0.1 (the first host of SLURM_STEP_NODELIST), MASTER_PORT $port (15000 + \
the last four digits of SLURM_JOB_ID)"
grep -qF "$want" "$work/rank0.log" || fail "rank 0 does not say where its placement came from: $want"
grep -q "^done: " "$work/rank0.log" || fail "rank 0 did not finish training"
head -4 "$work/rank0.log"
echo "PASS: $np rank(s) placed by srun's variables (port $port)"
