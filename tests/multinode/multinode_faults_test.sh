#!/usr/bin/env bash
# Faults across hosts (network namespaces, scripts/netns.sh), 2 hosts x 1 rank, gloo, ddp-train's mlp recipe:
#  1. a slow link (tbf: 20 Mbit/s, up to 50 ms queueing; this kernel has no netem for delay and loss): the job
#     finishes, its weights equal a one-host run's
#  2. host 1's link cut mid-run: both hosts' jobs end (non-zero) within a bound set by --heartbeat-timeout,
#     and the survivors name the rank that stopped answering
#  3. host 1's ddprun SIGKILLed: its rank dies with it, host 0's job ends soon after, non-zero
#  4. mpi: mpirun across the hosts, host 1's link cut mid-run: each side's ranks end by their heartbeat (MPI
#     messages), rank 0 naming rank 1; mpirun ends too, given TCP keepalive for its daemons' links (its default
#     waits 300 s + 9 x 20 s: docs/reliability.md); its daemon on the cut host ends once the link is back
# usage: multinode_faults_test.sh BIN_DIR   (needs root for `ip netns`)
set -euo pipefail
hosts=2
source "$(dirname "$0")/lib.sh"
hb=3  # --heartbeat-timeout (s)

# start TAG PORT ARGS...: one ddprun per host in the background; pids in $h0 $h1.
start() {
  local tag=$1 port=$2
  shift 2
  for i in 0 1; do
    "$netns" exec "$i" "$bin/ddprun" --nnodes 2 --node-rank "$i" --nproc-per-node 1 --master-addr "$master" \
      --master-port "$port" --heartbeat-timeout $hb "$bin/ddp-train" mlp --no-progress "$@" \
      --out-dir "$work/$tag" > "$work/$tag.h$i.log" 2>&1 &
    eval "h$i=\$!"
  done
}
# wait_for PID SECONDS: sets $rc to the exit code, or "hung" after SECONDS (and kills it).
wait_for() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2
    t=$((t + 1))
    if [ $t -gt $((limit * 5)) ]; then kill -9 "$pid"; wait "$pid" 2>/dev/null || true; rc=hung; return; fi
  done
  rc=0
  wait "$pid" || rc=$?
}
# Waits until TAG's rank 0 has logged a training step.
running() { for _ in $(seq 600); do grep -q '"kind":"train"' "$work/$1/metrics.jsonl" 2>/dev/null && return; sleep 0.1; done; fail "$1 never started"; }
short=(--epochs 1 --limit-train 2048 --limit-test 256 --log-every 1)
long=(--epochs 1000 --log-every 1)

# 1. A slow link: finishes, equal to one host.
tc -n "$DDP_NETNS_PREFIX-h1" qdisc add dev eth0 root tbf rate 20mbit burst 64kbit latency 50ms
start lossy 29701 "${short[@]}"
for i in 0 1; do wait_for "$(eval echo \$h$i)" 600; [ "$rc" = 0 ] || { tail -20 "$work/lossy.h$i.log"; fail "slow link: host $i: $rc"; }; done
tc -n "$DDP_NETNS_PREFIX-h1" qdisc del dev eth0 root
"$bin/ddprun" --nproc-per-node 2 --standalone "$bin/ddp-train" mlp --no-progress "${short[@]}" --out-dir "$work/one" > "$work/one.log" 2>&1
${DDP_PYTHON:-/usr/bin/python3} - "$work/lossy/checkpoints" "$work/one/checkpoints" <<'PY'
import os, sys, torch
a, b = (torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip())) for d in sys.argv[1:3])
for k in a["model"]:
    assert torch.equal(a["model"][k], b["model"][k]), "FAIL: " + k
print("slow link: equal to one host,", a["step"], "steps")
PY

# 2. Host 1's link cut: both sides end, naming the silent peer.
start cut 29702 "${long[@]}"
running cut
t0=$SECONDS
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 down
limit=$((hb * 10 + 30))
wait_for "$h0" $limit
rc0=$rc
wait_for "$h1" $limit
rc1=$rc
echo "link cut: host 0 ended with $rc0, host 1 with $rc1, $((SECONDS - t0)) s after the cut"
[ "$rc0" != hung ] && [ "$rc0" != 0 ] || { tail -20 "$work/cut.h0.log"; fail "host 0 after the cut: $rc0"; }
[ "$rc1" != hung ] && [ "$rc1" != 0 ] || { tail -20 "$work/cut.h1.log"; fail "host 1 after the cut: $rc1"; }
grep -q "rank 1 stopped answering" "$work/cut.h0.log" || { tail -20 "$work/cut.h0.log"; fail "host 0 does not name rank 1"; }
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 up

# 3. Host 1's agent killed: its rank goes with it; host 0 ends.
start agent 29703 "${long[@]}"
running agent
t0=$SECONDS
kill -9 "$h1"  # ip netns exec replaced itself with ddprun: $h1 is host 1's ddprun
wait_for "$h0" $((hb * 10 + 30))
rc0=$rc
sleep 1
pgrep -f -- "--out-dir $work/agent" > /dev/null && fail "a rank of the killed agent still runs"
echo "agent killed: host 0 ended with $rc0, $((SECONDS - t0)) s after the kill"
[ "$rc0" != hung ] && [ "$rc0" != 0 ] || { tail -20 "$work/agent.h0.log"; fail "host 0 after the agent died: $rc0"; }

# 4. mpi across the hosts, host 1's link cut.
mpirun=$(command -v mpirun) || fail "mpirun not found"
"$netns" exec 0 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -H "$master:1,$("$netns" addr 1):1" \
  --mca plm_rsh_agent "$netns agent" --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 \
  -x DDP_BACKEND=mpi -x DDP_NETNS_PREFIX -x OMP_NUM_THREADS -x DDP_HEARTBEAT_TIMEOUT=$hb \
  "$bin/ddp-train" mlp --no-progress "${long[@]}" --out-dir "$work/mpicut" > "$work/mpicut.log" 2>&1 &
mpi=$!
running mpicut
t0=$SECONDS
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 down
wait_for "$mpi" $((hb * 10 + 30))
echo "mpi link cut: mpirun ended with $rc, $((SECONDS - t0)) s after the cut"
[ "$rc" != hung ] && [ "$rc" != 0 ] || { tail -20 "$work/mpicut.log"; fail "mpirun after the cut: $rc"; }
grep -q "\[mpi\] rank 0/2: rank 1 stopped answering: no heartbeat for $hb s" "$work/mpicut.log" ||
  { tail -20 "$work/mpicut.log"; fail "rank 0 does not name rank 1"; }
# Host 1's rank ends by its own heartbeat (rank 0 is silent to it), with no mpirun to end it.
for _ in $(seq $((hb * 10 * 5))); do pgrep -f -- "--out-dir $work/mpicut" > /dev/null || break; sleep 0.2; done
pgrep -f -- "--out-dir $work/mpicut" > /dev/null && fail "a rank of the mpi job still runs $((SECONDS - t0)) s after the cut"
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 up
for _ in $(seq 150); do [ -z "$(ip netns pids "$DDP_NETNS_PREFIX-h1")" ] && break; sleep 0.2; done
[ -z "$(ip netns pids "$DDP_NETNS_PREFIX-h1")" ] ||
  fail "host 1 still runs $(ip netns pids "$DDP_NETNS_PREFIX-h1" | xargs -r ps -o comm= -p | xargs) 30 s after its link came back"
echo "multinode_faults_test: all cases passed"
