#!/usr/bin/env bash
# srun ddprun: one ddprun per node, as srun starts it on each of two nodes (here both on this machine, node 0 at
# 127.0.0.1), with no --nnodes, --node-rank, --master-addr or --master-port: Slurm's variables give them, each
# ddprun says so, and the 2 x NPROC ranks train together.
# usage: srun_ddprun_test.sh DDPRUN DDP_TRAIN NPROC
set -euo pipefail
ddprun=$1 train=$2 nproc=$3 recipe=mlp
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; for f in "$work"/node*.log; do echo "== $f"; cat "$f"; done; exit 1; }
job=$(${DDP_PYTHON:-/usr/bin/python3} "$(dirname "$0")/slurm_free_job.py") || fail "no free port in [15000, 24999]"
port=$((15000 + job % 10000))
unset_launcher_env
pids=()
for node in 0 1; do
  SLURM_JOB_ID=$job SLURM_PROCID=$node SLURM_LOCALID=0 SLURM_NODEID=$node SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 \
    SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE="1(x2)" SLURM_STEP_NODELIST=127.0.0.1,localhost \
    DDP_TIMEOUT=120 OMP_NUM_THREADS=1 timeout 600 "$ddprun" --nproc-per-node "$nproc" --backend gloo "$train" mlp \
    --limit-train 384 --limit-test 64 --epochs 1 --no-progress --out-dir "$work/out" > "$work/node$node.log" 2>&1 &
  pids+=($!)
done
for node in 0 1; do wait "${pids[$node]}" || fail "node $node's ddprun exited with $?"; done
for node in 0 1; do
  want="placed by srun: --nnodes 2 (SLURM_STEP_NUM_NODES), --node-rank $node (SLURM_NODEID), --master-addr 127.0.0.1 \
(the first host of SLURM_STEP_NODELIST), --master-port $port (15000 + the last four digits of SLURM_JOB_ID), --rdzv-id \
$job (SLURM_JOB_ID)"
  grep -qF "$want" "$work/node$node.log" || fail "node $node's ddprun does not say: $want"
done
grep -q "ddp-train mlp: $((2 * nproc)) rank(s) on gloo" "$work/node0.log" || fail "rank 0's first line"
grep -q "done: " "$work/node0.log" || fail "rank 0 did not finish training"
echo "PASS: 2 nodes x $nproc ranks, each ddprun placed by srun's variables (port $port)"
