#!/usr/bin/env bash
# Elastic ddprun across hosts (--rdzv-backend c10d; network namespaces, scripts/netns.sh), 2 hosts:
#  a. --nnodes 2 --rdzv-endpoint <host 0> on both, no --node-rank (host 0: 2 ranks, host 1: 1): node ranks,
#     RANK/WORLD_SIZE/GROUP_RANK come from the rendezvous, and suite_mp's all_reduce cases pass (exact sums)
#  b. --nnodes 1:2 --max-restarts 3, ddp-train fashion-mnist on tiny data: host 1's link is cut mid-run; host 0
#     restarts, re-rendezvous alone, resumes from the last checkpoint with 1 rank and finishes (exit 0, the final
#     checkpoint has every epoch); host 1's ddprun ends non-zero, naming the lost store
#  c. --nnodes 1:2 --max-restarts 2, dist_probe until-restart: host 1's agent (ddprun) is SIGKILLed; its rank dies
#     with it, host 0's rank loses its peer, host 0 re-rendezvouses alone and its restarted rank finishes
# usage: multinode_elastic_test.sh BIN_DIR   (needs root for `ip netns`)
set -euo pipefail
SECONDS=0
hosts=2
source "$(dirname "$0")/lib.sh"
export DDP_TIMEOUT=60
port=29400  # the endpoint port (each host is its own network namespace)

# a. Fixed 2 nodes, ranks from the rendezvous.
for i in 0 1; do
  "$netns" exec "$i" "$bin/ddprun" --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "$master:$port" --rdzv-id a \
    --nproc-per-node $((2 - i)) "$bin/ddprun_probe" env > "$work/a.env.h$i.log" 2>&1 &
  eval "p$i=\$!"
done
wait "$p0" || { cat "$work/a.env.h0.log"; fail "a: host 0's probe"; }
wait "$p1" || { cat "$work/a.env.h1.log"; fail "a: host 1's probe"; }
for want in "0 0 0" "0 1 1" "1 0 2"; do  # host, local rank, rank
  set -- $want
  grep -q "^\[rank $3\] RANK=$3$" "$work/a.env.h$1.log" || { cat "$work/a.env.h$1.log"; fail "a: no rank $3 on host $1"; }
done
grep -q "^\[rank 2\] GROUP_RANK=1$" "$work/a.env.h1.log" || fail "a: host 1 is not node 1"
grep -q "^\[rank 0\] GROUP_RANK=0$" "$work/a.env.h0.log" || fail "a: host 0 (the endpoint) is not node 0"
[ "$(grep -c "WORLD_SIZE=3$" "$work"/a.env.h*.log | awk -F: '{s += $2} END {print s}')" = 3 ] || fail "a: WORLD_SIZE"
grep -q "^\[rank 2\] MASTER_ADDR=$master$" "$work/a.env.h1.log" || fail "a: MASTER_ADDR on host 1"
for i in 0 1; do
  "$netns" exec "$i" "$bin/ddprun" --nnodes 2 --rdzv-endpoint "$master:$port" --rdzv-id a2 \
    --nproc-per-node $((2 - i)) "$bin/suite_mp" --gtest_brief=1 --gtest_filter='*AllReduce*' \
    > "$work/a.suite.h$i.log" 2>&1 &
  eval "p$i=\$!"
done
wait "$p0" || { tail -30 "$work/a.suite.h0.log"; fail "a: host 0's suite"; }
wait "$p1" || { tail -30 "$work/a.suite.h1.log"; fail "a: host 1's suite"; }
grep -q "PASSED" "$work/a.suite.h0.log" || fail "a: no PASSED line"
echo "[$SECONDS s] a: 2 hosts (2 + 1 ranks) from the c10d rendezvous; all_reduce cases passed"

# b. 1:2 nodes, host 1's link cut mid-run: host 0 goes on alone from the last checkpoint.
${DDP_PYTHON:-/usr/bin/python3} "$here/../train/make_tiny_data.py" "$work/data" > /dev/null
epochs=4
for i in 0 1; do
  "$netns" exec "$i" "$bin/ddprun" --nnodes 1:2 --rdzv-endpoint "$master:$port" --rdzv-id b --max-restarts 3 \
    --rdzv-conf last_call_timeout=2,join_timeout=30 --monitor-interval 0.2 --heartbeat-timeout 3 --kill-grace 2 \
    --nproc-per-node 1 "$bin/ddp-train" fashion-mnist --data-dir "$work/data/fashion" --epochs $epochs \
    --batch-size 8 --data sampler --checkpoint-every 4 --resume --no-progress --out-dir "$work/b" > "$work/b.h$i.log" 2>&1 &
  eval "p$i=\$!"
done
for _ in $(seq 600); do [ -s "$work/b/checkpoints/latest" ] && break; sleep 0.1; done
[ -s "$work/b/checkpoints/latest" ] || { tail -20 "$work/b.h0.log"; fail "b: no checkpoint within 60 s"; }
# Round 0 has both hosts unless host 1 started more than last_call_timeout late (then round 1 has them: a bigger
# round is not counted as a restart).
for _ in $(seq 600); do grep -q "node rank 0 of 2 node(s)" "$work/b.h0.log" && break; sleep 0.1; done
grep -q "node rank 0 of 2 node(s)" "$work/b.h0.log" || { cat "$work/b.h0.log"; fail "b: no round with 2 nodes"; }
grep -q "epoch $epochs/$epochs" "$work/b.h0.log" && fail "b: training ended before the fault (make it longer)"
t0=$(date +%s.%N)
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 down
alone() { grep "node rank 0 of" "$work/b.h0.log" | tail -n1 | grep -q "node rank 0 of 1 node(s)"; }
for _ in $(seq 600); do alone && break; sleep 0.05; done
t1=$(date +%s.%N)
alone || { cat "$work/b.h0.log"; fail "b: no round alone after the cut"; }
rc0=0
wait "$p0" || rc0=$?
[ "$rc0" = 0 ] || { cat "$work/b.h0.log"; fail "b: host 0 exited with $rc0"; }
rc1=0
wait "$p1" || rc1=$?
[ "$rc1" != 0 ] || { cat "$work/b.h1.log"; fail "b: host 1 exited 0 after its link was cut"; }
grep -q "rendezvous store at $master:$port" "$work/b.h1.log" || { cat "$work/b.h1.log"; fail "b: host 1 does not name the store"; }
grep -q "round [0-9]* succeeded after 1 restart" "$work/b.h0.log" || { cat "$work/b.h0.log"; fail "b: no success after 1 restart"; }
grep -q "resumed from" "$work/b.h0.log" || { cat "$work/b.h0.log"; fail "b: did not resume"; }
${DDP_PYTHON:-/usr/bin/python3} - "$work/b/checkpoints" $epochs <<'PY'
import os, sys, torch
d, epochs = sys.argv[1], int(sys.argv[2])
c = torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip()))
assert c["epoch"] == epochs and c["world_size"] == 1, (c["epoch"], c["world_size"])
print("b: final checkpoint: epoch", c["epoch"], "step", c["step"], "world size", c["world_size"])
PY
echo "b: $(grep -m1 'resumed from' "$work/b.h0.log")"
echo "b: host 1's link cut -> host 0 restarted alone in $(echo "$t1 - $t0" | bc) s; host 1's ddprun exited $rc1:" \
  "$(grep -m1 'rendezvous store at' "$work/b.h1.log")"

# c. 1:2 nodes, host 1's agent SIGKILLed: its rank dies with it (parent-death signal); host 0 goes on alone.
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 up  # cut in b
for i in 0 1; do
  "$netns" exec "$i" "$bin/ddprun" --nnodes 1:2 --rdzv-endpoint "$master:$port" --rdzv-id c --max-restarts 2 \
    --rdzv-conf last_call_timeout=2,join_timeout=30 --monitor-interval 0.2 --heartbeat-timeout 3 --kill-grace 2 \
    --nproc-per-node 1 "$bin/dist_probe" until-restart > "$work/c.h$i.log" 2>&1 &
  eval "p$i=\$!"
done
for _ in $(seq 600); do grep -q '\] ready$' "$work/c.h1.log" && break; sleep 0.1; done  # host 1 joins 2-node rounds only
grep -q "node rank 0 of 2 node(s)" "$work/c.h0.log" || { cat "$work"/c.h*.log; fail "c: no round with 2 nodes"; }
rank1=$(pgrep -f -P "$p1" dist_probe || true)  # host 1's rank, a child of its ddprun
t0=$(date +%s.%N)
kill -KILL "$p1"
rc0=0
wait "$p0" || rc0=$?
t1=$(date +%s.%N)
[ "$rc0" = 0 ] || { cat "$work/c.h0.log"; fail "c: host 0 exited with $rc0"; }
grep -q "node rank 0 of 1 node(s)" "$work/c.h0.log" || { cat "$work/c.h0.log"; fail "c: no round alone"; }
grep -q "restarted: world 1 sum 1" "$work/c.h0.log" || { cat "$work/c.h0.log"; fail "c: the restarted rank"; }
if [ -n "$rank1" ]; then
  for _ in $(seq 100); do kill -0 "$rank1" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$rank1" 2> /dev/null && fail "c: host 1's rank (pid $rank1) outlived its ddprun"
fi
echo "c: host 1's agent killed -> host 0 restarted alone and finished in $(echo "$t1 - $t0" | bc) s"
echo "multinode_elastic_test: all cases passed in $SECONDS s"
