#!/usr/bin/env bash
# ddprun --recovery inplace with the c10d rendezvous, --nnodes 1:2 (issue 47): two agents on this machine, 2 ranks
# each, ddp-train fashion-mnist.
#   grow:     agent 0 alone (a round of 1 node after last_call_timeout, world 2); agent 1 comes later and attaches to
#             the running round: its ranks join, the world grows 2 -> 4 without a restart; both exit 0.
#   comeback: both agents in the round (world 4); agent 1 SIGKILLed: node 0's ranks go on as a world of 2 and its
#             ddprun counts node 1 lost after --heartbeat-timeout, which frees its place; agent 1 started again
#             attaches, its ranks join: 4 -> 2 -> 4.
#   full:     both agents in the round; a third agent finds the round at --nnodes' 2, waits for a place and fails
#             after join_timeout, naming the limit; the job goes on and ends normally.
#   below_min: --nnodes 2 (MIN 2), --max-restarts 1; agent 1 SIGKILLed: node 0 counts it lost, one node is fewer
#             than MIN, so it fails the round: its ranks save the committed state on the stop, and it re-joins the
#             rendezvous (the restart path); agent 1 started again, round 1 resumes from that very step.
# usage: inplace_c10d_test.sh DDPRUN DDP_TRAIN CASE
set -euo pipefail
ddprun=$1 train=$2 case=$3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }
epochs=30
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo
  --out-dir "$work/run")
port=$(${DDP_PYTHON:-/usr/bin/python3} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
agent() {  # TAG EXTRA_FLAGS...: an agent in the background, its pid in $pid, its output in $work/TAG.log
  local tag=$1
  shift
  "$ddprun" --nnodes "$nnodes" --rdzv-endpoint "127.0.0.1:$port" --rdzv-id inplace-c10d --nproc-per-node 2 \
    --rdzv-conf last_call_timeout=1 --recovery inplace --heartbeat-timeout 5 --monitor-interval 0.1 "$@" \
    "$train" "${args[@]}" > "$work/$tag.log" 2>&1 &
  pid=$!
}
wait_line() {  # FILE TEXT
  for _ in $(seq 900); do grep -qE -- "$2" "$1" 2>/dev/null && return; sleep 0.1; done
  fail "no '$2' in $1 within 90 s"
}
has() { grep -qE -- "$2" "$work/$1.log" || fail "$1's output lacks: $2"; }
nnodes=1:2 first=()
[ "$case" = below_min ] && nnodes=2 first=(--max-restarts 1 --kill-grace 60)  # the save on the stop: never cut
# Both agents in round 0: the host waits for the second (the round closes at once when it joins, MAX 2), however
# late a loaded machine starts it (last_call_timeout=1 formed a round of 1 node once agent 1 started 1.5 s late).
host=("${first[@]}")
case $case in comeback|full) host+=(--rdzv-conf last_call_timeout=60) ;; esac
agent a0 "${host[@]}"
a0=$pid
wait_line "$work/a0.log" "hosting the c10d rendezvous"
case $case in
  grow)
    wait_line "$work/a0.log" "epoch 2/$epochs"
    agent a1
    a1=$pid ;;
  comeback|full|below_min)
    agent a1 "${first[@]}"
    a1=$pid
    wait_line "$work/a0.log" "epoch 2/$epochs" ;;
esac
case $case in
  comeback)
    kill -KILL $a1
    wait $a1 || true
    wait_line "$work/a0.log" "node 1's ddprun went silent for 5 s"
    mv "$work/a1.log" "$work/a1-lost.log"
    agent a1
    a1=$pid ;;
  below_min)
    kill -KILL $a1
    wait $a1 || true
    wait_line "$work/a0.log" "re-joining the rendezvous for round 1"
    mv "$work/a1.log" "$work/a1-lost.log"
    agent a1 "${first[@]}"
    a1=$pid ;;
  full)
    agent a2 --rdzv-conf last_call_timeout=1,join_timeout=3
    rc2=0
    wait $pid || rc2=$?
    [ $rc2 = 1 ] || fail "the third agent exited with $rc2, want 1"
    has a2 "round 0 runs 2 node\(s\), the most --nnodes allows: waiting for a place"
    has a2 "round 0 kept 2 node\(s\), the most --nnodes allows, for join_timeout 3 s .*: no place for this node" ;;
esac
rc0=0 rc1=0
wait $a0 || rc0=$?
wait $a1 || rc1=$?
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "the agents exited with $rc0 and $rc1"
case $case in
  grow)
    has a0 "round 0: node rank 0 of 1 node\(s\)"
    has a1 "round 0 is running \(--recovery inplace\): this node attaches to it as node 1; its ranks join the job"
    has a0 "^\[rank 0\] admitted new ranks: world 2 -> (3|4) "
    has a0 "^\[rank 0\] replicas identical after in-place recovery: 4 rank\(s\)" ;;
  comeback)
    has a0 "^\[rank 0\] in-place recovery: world 4 -> 2 \(members 0, 1, 2, 3 -> 0, 1, generation 1\)"
    has a1 "round 0 is running \(--recovery inplace\): this node attaches to it as node 2; its ranks join the job"
    has a0 "^\[rank 0\] admitted new ranks: world 2 -> (3|4) "
    has a0 "^\[rank 0\] replicas identical after in-place recovery: 4 rank\(s\)" ;;
  full)
    has a0 "round 0: node rank 0 of 2 node\(s\)" ;;
  below_min)
    has a0 "node 1's ddprun went silent for 5 s"
    has a0 "round 0 failed on node 0: only 1 node left, fewer than --nnodes' minimum 2 \(--recovery inplace falls back to the restart path\)"
    has a0 "re-joining the rendezvous for round 1 \(restart 1 of 1\)"
    saved=$(grep -oE "preempted \(SIGTERM\): stopped after step [0-9]+" "$work/a0.log" | grep -oE "[0-9]+$" | head -1)
    [ -n "$saved" ] || fail "node 0's ranks did not save the committed state on the stop"
    has a0 "^\[rank 0\] resumed from .* at epoch [0-9]+, step $saved$"
    has a0 "round 1 succeeded after 1 restart" ;;
esac
has a0 "^\[rank 0\] epoch $epochs/$epochs "
grep -hE "round [01]|in-place recovery|preempted|resumed from|admitted new ranks|joined the running job|went silent|most --nnodes" "$work"/a*.log
