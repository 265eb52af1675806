#!/usr/bin/env bash
# ddprun --recovery inplace (issue 47): the replacement SIGKILLed while it joins. Rank VICTIM is killed within
# epoch 3; ddprun starts a replacement (--max-restarts 2), which is killed as soon as it says it asked to join (the
# members admit joiners at their next step boundary: it is lost before or right after its admission). ddprun
# marks it lost by the member id it registered and starts another; that one joins. The world ends at NPROC again,
# the replicas identical, every step of the run accounted for, ddprun exits 0.
# usage: inplace_joiner_killed_test.sh DDPRUN DDP_TRAIN NPROC VICTIM
set -euo pipefail
ddprun=$1 train=$2 np=$3 victim=$4
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
epochs=16
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo)
"$ddprun" --standalone --nproc-per-node "$np" --recovery inplace --monitor-interval 0.1 --max-restarts 2 "$train" \
  "${args[@]}" --out-dir "$work/run" > "$work/log" 2>&1 &
launcher=$!
rank_pids() {  # RANK [joiner]: the launcher's children with RANK=R (and DDP_JOIN=1)
  local pid env
  for pid in $(pgrep -P $launcher); do
    env=$(tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" || true)
    grep -qx "RANK=$1" <<< "$env" || continue
    [ $# = 1 ] || grep -qx "DDP_JOIN=1" <<< "$env" || continue
    echo "$pid"
  done
}
for _ in $(seq 900); do grep -q "epoch 2/$epochs" "$work/log" && break; sleep 0.1; done
grep -q "epoch 2/$epochs" "$work/log" || { kill -KILL $launcher; fail "no epoch 2 within 90 s"; }
sleep 0.2
kill -KILL $(rank_pids "$victim")
joiner=$np  # the first joiner's member id: the launch world's size
for _ in $(seq 3000); do grep -q "member $joiner: asked to join" "$work/log" && break; sleep 0.01; done
grep -q "member $joiner: asked to join" "$work/log" || { kill -KILL $launcher; fail "the replacement never asked to join"; }
kill -KILL $(rank_pids "$victim" joiner)
rc=0
wait $launcher || rc=$?
[ $rc = 0 ] || fail "ddprun exited with $rc"
has() { grep -qE -- "$1" "$work/log" || fail "the output lacks: $1"; }
has "^ddprun: rank $victim was lost \(SIGKILL\); the others go on, and a replacement joins them \(restart 1 of 2"
has "^ddprun: rank $victim was lost \(SIGKILL\); the others go on, and a replacement joins them \(restart 2 of 2"
has "^\[rank $victim\] \[elastic\] member $((joiner + 1)): asked to join"
has "^\[rank $victim\] .*joined the running job as rank [0-9]+ of $np"
has "^\[rank [0-9]+\] replicas identical after in-place recovery: $np rank\(s\)"
has "^ddprun: lost rank\(s\) $victim, $victim on the way \(2 replaced\); the other ranks ended normally"
# Lost before its admission, the generation may form without it: said so, never "admitted new ranks: world 2 -> 2".
! grep -qE "admitted new ranks: world ([0-9]+) -> \1 " "$work/log" || fail "an admission that admitted no one is told as one"
if grep -q "member $joiner, generation [0-9]*: joined" "$work/log"; then
  echo "the first replacement was killed right after its admission (a member lost: recovered in place)"
else
  echo "the first replacement was killed before its admission (left out of the next generation)"
fi
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/run")" $epochs <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
if c["epoch"] != int(sys.argv[2]):
    sys.exit("FAIL: the last checkpoint is of epoch %d, want %s" % (c["epoch"], sys.argv[2]))
print("ended at step %d, epoch %d" % (c["step"], c["epoch"]))
PY
grep -E "in-place recovery|admitted new ranks|joined the running job|asked to join" "$work/log"
