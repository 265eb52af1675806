#!/usr/bin/env bash
# ddp-train under ddprun --recovery inplace (issue 47):
#  1. with PLAIN (one case per world size: the rest run the same code), without a fault, a run equals the plain
#     launch's to the bit (the launch world's epochs and global batches, split over the ranks, are DistributedSampler's
#     own at the launch world);
#  2. ranks VICTIMS SIGKILLed together DELAY seconds after epoch 2 (0: at its checkpoint; else within epoch 3): the survivors rebuild their group, agree on the committed
#     state, go on with the launch's global batch split over fewer ranks, end with bit-identical replicas (their
#     digest), every step of the run accounted for (the final step count is the whole run's), and ddprun exits 0.
#  3. a victim given as R:stop is stopped (SIGSTOP) instead: ddprun kills it after --heartbeat-timeout 5, the same.
#     (Only then a short --heartbeat-timeout: it is also how long survivors wait for each other to rebuild, and a
#     survivor busy in a step on a loaded machine must not be counted lost.)
#  4. with REPLACE, --max-restarts gives each victim a replacement: it sets up alone, joins at the members' next
#     step boundary (two may join at different ones), receives their state, and the world grows back (4 -> 3 ->
#     4); the replicas, the joiners included, end identical.
# usage: inplace_test.sh DDPRUN DDP_TRAIN NPROC VICTIMS DELAY [replace] [plain]   (VICTIMS: R or R:stop, comma-separated)
set -euo pipefail
ddprun=$1 train=$2 np=$3 victims=$4 delay=$5
replace='' plain=''
for flag in "${@:6}"; do
  case $flag in
    replace) replace=1 ;;
    plain) plain=1 ;;
    *) echo "FAIL: unknown flag '$flag' (replace, plain)"; exit 2 ;;
  esac
done
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
epochs=6
[ -n "$replace" ] && epochs=12  # the replacements start, set up and join well before the end, even under load
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo)

# 1. Without a fault: the same bits as the plain launch.
if [ -n "$plain" ]; then
  "$ddprun" --standalone --nproc-per-node "$np" "$train" "${args[@]}" --out-dir "$work/plain" > "$work/plain.log" 2>&1 ||
    { cat "$work/plain.log"; fail "the plain run"; }
  "$ddprun" --standalone --nproc-per-node "$np" --recovery inplace "$train" "${args[@]}" --out-dir "$work/whole" \
    > "$work/whole.log" 2>&1 || { cat "$work/whole.log"; fail "the run under --recovery inplace without a fault"; }
  ${DDP_PYTHON:-/usr/bin/python3} "$here/same_weights.py" "$(latest "$work/plain")" "$(latest "$work/whole")" $epochs \
    "under --recovery inplace without a fault"
fi

# 2. The victims killed after epoch 2.
restarts=0
[ -n "$replace" ] && restarts=$(tr ',' '\n' <<< "$victims" | wc -l)
heartbeat=()
[[ $victims == *:stop* ]] && heartbeat=(--heartbeat-timeout 5)
"$ddprun" --standalone --nproc-per-node "$np" --recovery inplace --monitor-interval 0.1 "${heartbeat[@]}" \
  --max-restarts "$restarts" "$train" "${args[@]}" --out-dir "$work/lost" > "$work/log" 2>&1 &
launcher=$!
for _ in $(seq 900); do grep -q "epoch 2/$epochs" "$work/log" && break; sleep 0.1; done
grep -q "epoch 2/$epochs" "$work/log" || { kill -KILL $launcher; cat "$work/log"; fail "no epoch 2 line within 90 s"; }
sleep "$delay"
pids=() signals=()
for pid in $(pgrep -P $launcher); do
  environment=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null || true)
  for v in ${victims//,/ }; do
    grep -qx "RANK=${v%:stop}" <<< "$environment" || continue
    pids+=("$pid")
    signals+=("$([ "$v" = "${v%:stop}" ] && echo KILL || echo STOP)")
  done
done
[ ${#pids[@]} = "$(tr ',' '\n' <<< "$victims" | wc -l)" ] || { kill -KILL $launcher; cat "$work/log"; fail "victims not found"; }
for i in "${!pids[@]}"; do kill "-${signals[$i]}" "${pids[$i]}"; done
victims=$(tr ',' '\n' <<< "$victims" | sed 's/:stop$//' | sort -n | paste -sd,)
rc=0
wait $launcher || rc=$?
[ $rc = 0 ] || { cat "$work/log"; fail "ddprun exited with $rc"; }
left=$((np - ${#pids[@]}))
leader=0  # the lowest surviving launch rank is the new rank 0 (ddprun prefixes lines with launch ranks)
while grep -qw "$leader" <<< "${victims//,/ }"; do leader=$((leader + 1)); done
has() { grep -qE -- "$1" "$work/log" || { cat "$work/log"; fail "the output lacks: $1"; }; }
for v in ${victims//,/ }; do has "^ddprun: rank $v was lost \(SIGKILL\); the others go on"; done
has "^\[rank $leader\] in-place recovery: world $np -> $left \(members .*, generation 1\), going on from step [0-9]+ \(epoch [0-9]\) in [0-9.e-]+ s; global batch $((8 * np)) samples kept"
has "^\[rank $leader\] epoch $epochs/$epochs "
if [ -n "$replace" ]; then  # the world grew back: the joiners took the next ids, np on
  has "^\[rank $leader\] admitted new ranks: world [0-9]+ -> $np \(members .* -> .*, generation [0-9]+\), going on from step [0-9]+"
  for v in ${victims//,/ }; do has "^\[rank $v\] .*joined the running job as rank [0-9]+ of [0-9]+ at step [0-9]+, [0-9.]+ s after its start"; done
  has "^\[rank $leader\] replicas identical after in-place recovery: $np rank\(s\), parameters and optimizer digest [0-9a-f]+$"
  has "^ddprun: lost rank\(s\) ${victims//,/, } on the way \(${#pids[@]} replaced\); the other ranks ended normally"
else
  has "^\[rank $leader\] replicas identical after in-place recovery: $left rank\(s\), parameters and optimizer digest [0-9a-f]+$"
  has "^ddprun: lost rank\(s\) ${victims//,/, } on the way; the other ranks ended normally"
fi
# Every step accounted for: the launch world's steps per epoch (the train set's size over the global batch, 8 per
# launch rank), times the epochs.
per_epoch=$(steps_per_epoch $((8 * np))) || exit 1
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/lost")" $((epochs * per_epoch)) $epochs <<'PY'
import sys, torch
b = torch.load(sys.argv[1])
want = (int(sys.argv[2]), int(sys.argv[3]))
if (b["step"], b["epoch"]) != want:
    sys.exit("FAIL: the run that lost ranks ended at step %d, epoch %d; a whole run ends at step %d, epoch %d"
             % ((b["step"], b["epoch"]) + want))
print("every step accounted for: step %d, epoch %d" % want)
PY
grep -E "in-place recovery|admitted new ranks|joined the running job" "$work/log"
