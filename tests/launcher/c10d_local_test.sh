#!/usr/bin/env bash
# ddprun --rdzv-backend c10d with two agents on this machine (both on 127.0.0.1: the first to bind the endpoint
# hosts the store), no root needed; the ranks are small shell commands:
#  1. --nnodes 2, 2 + 1 ranks: RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT and the run id from the rendezvous
#  2. a rank fails in round 0: both agents restart (restart count 1) and succeed
#  3. restarts used up: both exit non-zero; the other agent names the failing node and rank
#  4. the agent hosting the store is SIGKILLed: the other one stops its ranks and exits 1 naming the endpoint
#  5. --nnodes 1:2 with one agent: a round of 1 after last_call_timeout; a second agent arriving makes a
#     bigger round (not counted as a restart)
# usage: c10d_local_test.sh DDPRUN
set -euo pipefail
ddprun=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }
free_port() { ${DDP_PYTHON:-/usr/bin/python3} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start TAG I ARGS...: agent I in the background, pid in $pI, output in $work/TAG.I.log.
start() {
  local tag=$1 i=$2
  shift 2
  "$ddprun" --rdzv-endpoint "127.0.0.1:$port" --monitor-interval 0.2 --kill-grace 1 "$@" > "$work/$tag.$i.log" 2>&1 &
  eval "p$i=\$!"
}
# hosting TAG: waits until agent 0 of TAG hosts the store (then agent 1 can only connect).
hosting() {
  for _ in $(seq 300); do grep -q "hosting the c10d rendezvous" "$work/$1.0.log" && return; sleep 0.1; done
  fail "$1: agent 0 does not host the store after 30 s"
}
# finish PID LIMIT: waits at most LIMIT seconds; sets $rc (or "hung").
finish() {
  local t=0
  while kill -0 "$1" 2>/dev/null; do
    sleep 0.1
    t=$((t + 1))
    if [ $t -gt $(($2 * 10)) ]; then kill -9 "$1"; rc=hung; return; fi
  done
  rc=0
  wait "$1" || rc=$?
}

# 1. Ranks from the rendezvous.
port=$(free_port)
env='echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE LOCAL_RANK=$LOCAL_RANK MASTER=$MASTER_ADDR ID=$TORCHELASTIC_RUN_ID"'
start env 0 --nnodes 2 --nproc-per-node 2 --rdzv-id j1 sh -c "$env"
hosting env
start env 1 --nnodes 2 --nproc-per-node 1 --rdzv-id j1 sh -c "$env"
finish "$p0" 60; [ "$rc" = 0 ] || fail "1: agent 0: $rc"
finish "$p1" 60; [ "$rc" = 0 ] || fail "1: agent 1: $rc"
grep -q "hosting the c10d rendezvous at 127.0.0.1:$port (job j1, --nnodes 2:2)" "$work/env.0.log" || fail "1: agent 0 not host"
for want in "0 RANK=0 WORLD_SIZE=3 GROUP_RANK=0 GROUP_WORLD_SIZE=2 LOCAL_RANK=0" \
            "0 RANK=1 WORLD_SIZE=3 GROUP_RANK=0 GROUP_WORLD_SIZE=2 LOCAL_RANK=1" \
            "1 RANK=2 WORLD_SIZE=3 GROUP_RANK=1 GROUP_WORLD_SIZE=2 LOCAL_RANK=0"; do
  i=${want%% *}
  grep -q "] ${want#* } MASTER=127.0.0.1 ID=j1$" "$work/env.$i.log" || fail "1: no '${want#* }' from agent $i"
done
echo "1: 2 agents, 3 ranks from the rendezvous"

# 2. A failure in round 0, restarted on both agents.
port=$(free_port)
prog='echo "RANK=$RANK RC=$TORCHELASTIC_RESTART_COUNT"; if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 0.3; exit 3; fi; [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 60; sleep 1; echo ok'
start fail 0 --nnodes 2 --max-restarts 2 sh -c "$prog"
hosting fail
start fail 1 --nnodes 2 --max-restarts 2 sh -c "$prog"
finish "$p0" 60; [ "$rc" = 0 ] || fail "2: agent 0: $rc"
finish "$p1" 60; [ "$rc" = 0 ] || fail "2: agent 1: $rc"
grep -q "stopped the ranks of this node (0): round 0 failed on node 1: rank 1 exit code 3" "$work/fail.0.log" || fail "2: agent 0's reason"
for i in 0 1; do
  grep -q "round 1: node rank $i of 2 node(s), ranks $i..$i of 2, .* restart count 1" "$work/fail.$i.log" || fail "2: round 1 on $i"
  grep -q "\] RANK=$i RC=1" "$work/fail.$i.log" || fail "2: restart count 1 on $i"
  grep -q "round 1 succeeded after 1 restart" "$work/fail.$i.log" || fail "2: success on $i"
done
echo "2: a rank failed; both agents restarted (restart count 1) and succeeded"

# 3. Restarts used up.
port=$(free_port)
prog='if [ "$RANK" = 1 ]; then sleep 0.3; exit 4; fi; sleep 30'
start out 0 --nnodes 2 --max-restarts 1 sh -c "$prog"
hosting out
start out 1 --nnodes 2 --max-restarts 1 sh -c "$prog"
finish "$p0" 60; rc0=$rc
finish "$p1" 60; rc1=$rc
[ "$rc0" = 1 ] || fail "3: agent 0 exited $rc0, expected 1 (its ranks were stopped)"
[ "$rc1" = 4 ] || fail "3: agent 1 exited $rc1, expected the rank's 4"
grep -q "failed after 1 restart (--max-restarts 1): restarts exhausted" "$work/out.0.log" || fail "3: agent 0's note"
grep -q "round 1 failed on node 1: rank 1 exit code 4" "$work/out.0.log" || fail "3: agent 0 does not name node 1"
echo "3: restarts exhausted: agents exited $rc0 and $rc1"

# 4. The store's host dies.
port=$(free_port)
start lost 0 --nnodes 2 --heartbeat-timeout 5 sh -c 'sleep 60'
hosting lost
start lost 1 --nnodes 2 --heartbeat-timeout 5 sh -c 'sleep 60'
for _ in $(seq 600); do grep -q "round 0:" "$work/lost.1.log" && break; sleep 0.1; done
grep -q "round 0:" "$work/lost.1.log" || fail "4: agent 1 not in round 0 within 60 s"
t0=$(date +%s.%N)
kill -9 "$p0"
finish "$p1" 30
t1=$(date +%s.%N)
[ "$rc" = 1 ] || fail "4: agent 1 exited $rc, expected 1"
grep -q "rendezvous store at 127.0.0.1:$port" "$work/lost.1.log" || fail "4: agent 1 does not name the endpoint"
echo "4: host agent killed; the other exited 1 after $(echo "$t1 - $t0" | bc) s: $(grep -m1 'rendezvous store at' "$work/lost.1.log")"

# 5. 1:2 nodes: alone after the last call, then bigger when a second agent arrives.
port=$(free_port)
prog='echo "WORLD_SIZE=$WORLD_SIZE RC=$TORCHELASTIC_RESTART_COUNT"; [ "$WORLD_SIZE" = 2 ] || exec sleep 60; sleep 0.5'
start grow 0 --nnodes 1:2 --rdzv-conf last_call_timeout=0.5 sh -c "$prog"
for _ in $(seq 600); do grep -q "WORLD_SIZE=1" "$work/grow.0.log" && break; sleep 0.1; done
grep -q "round 0: node rank 0 of 1 node(s)" "$work/grow.0.log" || fail "5: no round of 1"
start grow 1 --nnodes 1:2 --rdzv-conf last_call_timeout=0.5 sh -c "$prog"
finish "$p0" 60; [ "$rc" = 0 ] || fail "5: agent 0: $rc"
finish "$p1" 60; [ "$rc" = 0 ] || fail "5: agent 1: $rc"
grep -q "1 node(s) waiting to join (round 0 has 1 of at most 2): restarting into a bigger round" "$work/grow.0.log" || fail "5: reason"
grep -q "round 1: node rank 0 of 2 node(s), .* restart count 0" "$work/grow.0.log" || fail "5: round 1 on agent 0"
grep -q "round 1: node rank 1 of 2 node(s), .* restart count 0" "$work/grow.1.log" || fail "5: round 1 on agent 1"
echo "5: a second agent arrived: round 1 with 2 nodes, restart count 0"
echo "c10d_local_test: all cases passed"
