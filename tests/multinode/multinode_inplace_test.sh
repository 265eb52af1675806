#!/usr/bin/env bash
# ddprun --recovery inplace across hosts (network namespaces, scripts/netns.sh), 2 hosts x 2 ranks, gloo, ddp-train's
# mlp recipe (issue 47): host 1's link cut mid-run. No process dies and no connection is reset: host 0's ranks
# leave their collective when it times out (--timeout), count host 1's ranks lost once they stay silent for
# --heartbeat-timeout (host 1's ddprun cannot reach the store to say anything), and go on as a world of 2 to the
# end; host 0's ddprun exits 0, saying host 1 went silent. Host 1's ddprun gets no answer from the store within 5 s
# (its operations' deadline): it says this node is cut off, stops its ranks and exits non-zero.
# usage: multinode_inplace_test.sh BIN_DIR   (needs root for `ip netns`)
set -euo pipefail
hosts=2
source "$(dirname "$0")/lib.sh"
hb=3 timeout=10
epochs=30
for i in 0 1; do
  "$netns" exec "$i" "$bin/ddprun" --nnodes 2 --node-rank "$i" --nproc-per-node 2 --master-addr "$master" \
    --master-port 29711 --recovery inplace --heartbeat-timeout $hb --timeout $timeout --monitor-interval 0.2 \
    "$bin/ddp-train" mlp --no-progress --epochs $epochs --data sampler --out-dir "$work/run" \
    > "$work/h$i.log" 2>&1 &
  eval "h$i=\$!"
done
for _ in $(seq 600); do grep -q "epoch 2/$epochs" "$work/h0.log" && break; sleep 0.1; done
grep -q "epoch 2/$epochs" "$work/h0.log" || { kill -9 $h0 $h1; cat "$work/h0.log" "$work/h1.log"; fail "no epoch 2 within 60 s"; }
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 down
cut=$(date +%s)
rc0=0 rc1=0
wait $h0 || rc0=$?
wait $h1 || rc1=$?
ip -n "$DDP_NETNS_PREFIX-h1" link set eth0 up
show() { echo "--- host 0"; cat "$work/h0.log"; echo "--- host 1"; cat "$work/h1.log"; }
[ $rc0 = 0 ] || { show; fail "host 0's ddprun exited with $rc0"; }
[ $rc1 != 0 ] || { show; fail "host 1's ddprun exited 0 although its link was cut"; }
has() { grep -qE -- "$2" "$work/h$1.log" || { show; fail "host $1's output lacks: $2"; }; }
has 0 "^\[rank 0\] in-place recovery: world 4 -> 2 \(members 0, 1, 2, 3 -> 0, 1, generation 1\)"
has 0 "^\[rank 0\] replicas identical after in-place recovery: 2 rank\(s\)"
has 0 "^\[rank 0\] epoch $epochs/$epochs "
has 1 "^ddprun: stopped the ranks of this node \(2, 3\): this node is cut off from the job: the ranks' store at $master:29711 did not answer within 5 s"
has 0 "^ddprun: node 1's ddprun went silent for $hb s \(--heartbeat-timeout\): counted lost, with its ranks"
${DDP_PYTHON:-/usr/bin/python3} - "$work/run/checkpoints" $epochs <<'PY'
import os, sys, torch
d = sys.argv[1]
c = torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip()))
if c["epoch"] != int(sys.argv[2]):
    sys.exit("FAIL: the last checkpoint is of epoch %d, want %s" % (c["epoch"], sys.argv[2]))
print("host 0's ranks went on to the end: step %d, epoch %d, written by %d ranks" % (c["step"], c["epoch"], c["world_size"]))
PY
grep -h "in-place recovery" "$work/h0.log"
echo "host 1's link cut: host 0 went on (exit 0), host 1 ended with $rc1; $(($(date +%s) - cut)) s from the cut to both ends"
