#!/usr/bin/env bash
# ddprun --recovery inplace across fixed nodes (issue 47): two ddprun "nodes" on this machine (--nnodes 2, 2 ranks
# each, world 4); node 0's ddprun hosts the ranks' store, node 1's connects to it.
#   rank:  node 1's rank 3 SIGKILLed; node 1's ddprun marks it lost and starts a replacement (--max-restarts 1),
#          which joins: the world goes 4 -> 3 -> 4, the replicas end identical, both nodes exit 0.
#   node:  node 1's ddprun SIGKILLed (its ranks die with it): nobody marks them lost; node 0's ranks count them lost
#          after --heartbeat-timeout, go on as a world of 2 to the end; node 0's ddprun says node 1 went silent.
#   node0: both of node 0's ranks SIGKILLed (rank 0 among them): node 0's ddprun fails its attempt but keeps
#          serving the store until node 1 is done; node 1's ranks go on as a world of 2 and end normally.
#   comeback: node 1 lost whole as in `node`, then started again with the same command: its ddprun finds the job
#          running and starts its ranks as joiners; the world goes 4 -> 2 -> 4 and the replicas end identical.
# usage: inplace_nodes_test.sh DDPRUN DDP_TRAIN CASE
set -euo pipefail
ddprun=$1 train=$2 case=$3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; for n in 0 1; do echo "--- node $n"; cat "$work/node$n.log"; done; exit 1; }
epochs=8
[ "$case" = comeback ] && epochs=30  # node 1's ranks start again, set up and join well before the end
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo
  --out-dir "$work/run")
port=$(${DDP_PYTHON:-/usr/bin/python3} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
node() {  # NODE_RANK EXTRA_FLAGS...: one node's ddprun in the background
  local k=$1
  shift
  "$ddprun" --nnodes 2 --node-rank "$k" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
    --recovery inplace --heartbeat-timeout 5 --monitor-interval 0.1 "$@" "$train" "${args[@]}" \
    > "$work/node$k.log" 2>&1 &
}
restarts=0
[ "$case" = rank ] && restarts=1
node 0
node0=$!
node 1 --max-restarts $restarts
node1=$!
for _ in $(seq 900); do grep -q "epoch 2/$epochs" "$work/node0.log" "$work/node1.log" && break; sleep 0.1; done
grep -q "epoch 2/$epochs" "$work/node0.log" || { kill -KILL $node0 $node1; fail "no epoch 2 within 90 s"; }
sleep 0.2
kill_ranks() {  # LAUNCHER RANK...
  local launcher=$1 pid r
  shift
  for pid in $(pgrep -P "$launcher"); do
    for r in "$@"; do tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" | grep -qx "RANK=$r" && kill -KILL "$pid"; done
  done
}
case $case in
  rank) kill_ranks $node1 3 ;;
  node) kill -KILL $node1 ;;
  comeback)
    kill -KILL $node1
    wait $node1 || true
    for _ in $(seq 600); do grep -q "in-place recovery: world 4 -> 2" "$work/node0.log" && break; sleep 0.1; done
    mv "$work/node1.log" "$work/node1-lost.log"
    node 1
    node1=$! ;;
  comeback)
    [ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "the nodes exited with $rc0 and $rc1"
    has 0 "^\[rank 0\] in-place recovery: world 4 -> 2 \(members 0, 1, 2, 3 -> 0, 1, generation 1\)"
    has 1 "^ddprun: the job is running already \(this node comes back after it was lost\): its ranks join it"
    has 0 "^\[rank 0\] admitted new ranks: world 2 -> (3|4) "
    has 0 "^\[rank 0\] replicas identical after in-place recovery: 4 rank\(s\)"
    has 1 "^\[rank 2\] .*joined the running job as rank [23] of [34]"
    has 1 "^\[rank 3\] .*joined the running job as rank [23] of [34]" ;;
  node0) kill_ranks $node0 0 1 ;;
esac
rc0=0 rc1=0
wait $node0 || rc0=$?
wait $node1 || rc1=$?
has() { grep -qE -- "$2" "$work/node$1.log" || fail "node $1's output lacks: $2"; }
case $case in
  rank)
    [ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "the nodes exited with $rc0 and $rc1"
    has 1 "^ddprun: rank 3 was lost \(SIGKILL\); the others go on, and a replacement joins them"
    has 0 "^\[rank 0\] in-place recovery: world 4 -> 3 \(members 0, 1, 2, 3 -> 0, 1, 2, generation 1\)"
    has 0 "^\[rank 0\] admitted new ranks: world 3 -> 4 \(members 0, 1, 2 -> 0, 1, 2, 4, generation 2\)"
    has 1 "^\[rank 3\] .*joined the running job as rank 3 of 4"
    has 0 "^\[rank 0\] replicas identical after in-place recovery: 4 rank\(s\)"
    has 0 "^\[rank 0\] epoch $epochs/$epochs " ;;
  node)
    [ $rc0 = 0 ] || fail "node 0 exited with $rc0"
    has 0 "^\[rank 0\] in-place recovery: world 4 -> 2 \(members 0, 1, 2, 3 -> 0, 1, generation 1\)"
    has 0 "^\[rank 0\] replicas identical after in-place recovery: 2 rank\(s\)"
    has 0 "^\[rank 0\] epoch $epochs/$epochs "
    has 0 "^ddprun: node 1's ddprun went silent for 5 s \(--heartbeat-timeout\): counted lost, with its ranks" ;;
  node0)
    [ $rc1 = 0 ] && [ $rc0 = 137 ] || fail "the nodes exited with $rc0 and $rc1 (want 137: node 0 lost its ranks, and 0)"
    has 0 "^ddprun: this node's ranks ended; serving the ranks' store until the other nodes' end"
    has 1 "^\[rank 2\] in-place recovery: world 4 -> 2 \(members 0, 1, 2, 3 -> 2, 3, generation 1\)"
    has 1 "^\[rank 2\] replicas identical after in-place recovery: 2 rank\(s\)"
    has 1 "^\[rank 2\] epoch $epochs/$epochs " ;;
esac
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/run")" $epochs <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
if c["epoch"] != int(sys.argv[2]):
    sys.exit("FAIL: the last checkpoint is of epoch %d, want %s" % (c["epoch"], sys.argv[2]))
print("ended at step %d, epoch %d" % (c["step"], c["epoch"]))
PY
grep -hE "in-place recovery|admitted new ranks|joined the running job|went silent|serving the ranks' store" \
  "$work/node0.log" "$work/node1.log"
