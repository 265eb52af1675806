#!/usr/bin/env bash
# Multi-node runs on separate hosts: network namespaces joined by a bridge (scripts/netns.sh), one ddprun per
# host, ranks talking over the hosts' eth0 only.
#  1. gloo: the collective and DDP suite (suite_mp, exact expected values) on 2 hosts x 2 ranks; its collectives
#     and DDP/FSDP equivalences on 3 hosts x 1
#  2. gloo: ddp-train fashion-mnist on 2 hosts x 1 rank: the final checkpoint equals a one-host run's, bit for bit
#  3. mpi: suite_mp's collectives and equivalences through mpirun across the hosts (a launch agent runs `ip netns exec`), TCP only
#  4. mpi: ddp-train fashion-mnist through mpirun on 2 hosts x 1 rank: the final checkpoint equals the one-host gloo run's
# usage: multinode_test.sh BIN_DIR   (needs root for `ip netns`)
set -euo pipefail
SECONDS=0
hosts=3
source "$(dirname "$0")/lib.sh"
export DDP_TIMEOUT=120

# One ddprun per host (HOSTS hosts, NPROC ranks each), all started at once; every one must exit 0.
# Each host's output goes to $work/<tag>.h<i>.log.
on_hosts() {
  local tag=$1 hosts=$2 nproc=$3 port=$4
  shift 4
  local pids=() i rc=0
  for ((i = 0; i < hosts; i++)); do
    "$netns" exec "$i" "$bin/ddprun" --nnodes "$hosts" --node-rank "$i" --nproc-per-node "$nproc" \
      --master-addr "$master" --master-port "$port" "$@" > "$work/$tag.h$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "--- host $i of $tag:"
      tail -n 30 "$work/$tag.h$i.log"
      rc=1
    fi
  done
  [ $rc = 0 ] || fail "$tag: a host failed"
}

# Bytes host 1 sent over its eth0: the ranks really talk across hosts.
tx() { "$netns" exec 1 cat /sys/class/net/eth0/statistics/tx_bytes; }
before=$(tx)
on_hosts suite22 2 2 29601 "$bin/suite_mp" --gtest_brief=1
sent=$(( $(tx) - before ))
grep -q "PASSED" "$work/suite22.h0.log" || fail "suite on 2x2: no PASSED line"
[ "$sent" -gt 1000000 ] || fail "host 1 sent only $sent bytes over eth0"
echo "host 1 sent $sent bytes over its link"
# The others run the collectives and the DDP/FSDP equivalences (the whole suite takes minutes per run here).
core='*AllReduce*:*Broadcast*:*AllGather*:*ReduceScatter*:*AllToAll*:*SendRecv*:*Barrier*:*DdpGradientEquivalence*:*DdpBucketView*:*FsdpEqualsDdp*'
on_hosts suite31 3 1 29602 "$bin/suite_mp" --gtest_brief=1 --gtest_filter="$core"
echo "[$SECONDS s] gloo suite passed on 2 hosts x 2 ranks and 3 hosts x 1 rank"

${DDP_PYTHON:-/usr/bin/python3} "$here/../train/make_tiny_data.py" "$work/data"
train=(fashion-mnist --data-dir "$work/data/fashion" --epochs 1 --batch-size 16 --no-progress --data sampler)
on_hosts train21 2 1 29603 "$bin/ddp-train" "${train[@]}" --out-dir "$work/multi"
"$bin/ddprun" --nproc-per-node 2 --standalone "$bin/ddp-train" "${train[@]}" --out-dir "$work/single" > "$work/single.log" 2>&1 ||
  { tail -n 30 "$work/single.log"; fail "the one-host run"; }
grep -q "ddp-train fashion-mnist: 2 rank(s) on gloo" "$work/train21.h0.log" || fail "the two-host run did not run 2 ranks on gloo"
# same_weights OUT_A OUT_B WHAT: the latest checkpoints of two runs hold the same step and bit-identical weights.
same_weights() {
  ${DDP_PYTHON:-/usr/bin/python3} - "$1/checkpoints" "$2/checkpoints" "$3" <<'PY'
import os, sys, torch
a, b = (torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip())) for d in sys.argv[1:3])
assert a["step"] == b["step"] > 0, (a["step"], b["step"])
for k in a["model"]:
    assert torch.equal(a["model"][k], b["model"][k]), "FAIL: " + k + " differs: " + sys.argv[3]
print("ddp-train", sys.argv[3] + ":", len(a["model"]), "tensors, step", a["step"])
PY
}
same_weights "$work/multi" "$work/single" "on 2 hosts equals 1 host"

# MPI: mpirun on host 0 starts host 1's ranks through the agent; TCP between the hosts (no shared memory).
mpirun=$(command -v mpirun) || fail "mpirun not found"
before=$(tx)
"$netns" exec 0 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -H "$master:2,$("$netns" addr 1):2" \
  --mca plm_rsh_agent "$netns agent" --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  -x DDP_BACKEND=mpi -x DDP_NETNS_PREFIX -x OMP_NUM_THREADS -x DDP_TIMEOUT \
  "$bin/suite_mp" --gtest_brief=1 --gtest_filter="$core" > "$work/mpi.log" 2>&1 || { tail -n 40 "$work/mpi.log"; fail "mpi suite across hosts"; }
sent=$(( $(tx) - before ))
[ "$sent" -gt 1000000 ] || fail "mpi: host 1 sent only $sent bytes over eth0"
echo "[$SECONDS s] mpi suite passed on 2 hosts x 2 ranks; host 1 sent $sent bytes over its link"

# ddp-train over MPI across the hosts (2 ranks: a sum of two gradients is exact in any order, so it equals gloo's run).
"$netns" exec 0 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -H "$master:1,$("$netns" addr 1):1" \
  --mca plm_rsh_agent "$netns agent" --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  -x DDP_BACKEND=mpi -x DDP_NETNS_PREFIX -x OMP_NUM_THREADS -x DDP_TIMEOUT \
  "$bin/ddp-train" "${train[@]}" --out-dir "$work/mpi-train" > "$work/mpi-train.log" 2>&1 ||
  { tail -n 40 "$work/mpi-train.log"; fail "ddp-train over mpi across hosts"; }
grep -q "ddp-train fashion-mnist: 2 rank(s) on mpi" "$work/mpi-train.log" || fail "the mpi run did not run 2 ranks on mpi"
same_weights "$work/mpi-train" "$work/single" "over mpi on 2 hosts equals gloo on 1 host"
echo "multinode_test: all cases passed in $SECONDS s"
