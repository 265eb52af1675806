#!/usr/bin/env bash
# ddprun --recovery inplace (issue 47): a run whose world went NPROC -> NPROC-1 -> NPROC (rank VICTIM SIGKILLed
# within an epoch, a replacement joining later) ends equal, to the bit (model, buffers and optimizer state), to a
# reference that replays the same worlds deterministically: a run at NPROC ranks to the step the lost run recovered
# at, resumed from that step's checkpoint at NPROC-1 ranks (the launch world's global batch kept) to the step the
# replacement was admitted at, resumed again at NPROC ranks to the end. In-place recovery is thereby a restart from
# the last completed step without the restart: no step redone, none skipped, nothing read from disk.
# usage: inplace_replay_test.sh DDPRUN DDP_TRAIN NPROC VICTIM
set -euo pipefail
ddprun=$1 train=$2 np=$3 victim=$4
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
python=${DDP_PYTHON:-/usr/bin/python3}
epochs=12
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs $epochs --data sampler --backend gloo)

# 1. The lost run: the victim SIGKILLed within epoch 3; --max-restarts 1 starts its replacement, which joins.
"$ddprun" --standalone --nproc-per-node "$np" --recovery inplace --monitor-interval 0.1 --max-restarts 1 "$train" \
  "${args[@]}" --out-dir "$work/lost" > "$work/lost.log" 2>&1 &
kill_rank_in_epoch3 $! "$work/lost.log" $epochs "$victim"

# 2. The worlds it went through: "world_change" events (to, step) in rank 0's metrics.
mapfile -t changes < <("$python" - "$work/lost/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("kind") == "world_change":
        print(e["to"], e["step"])
PY
)
[ "${#changes[@]}" = 2 ] && [ "${changes[0]%% *}" = $((np - 1)) ] && [ "${changes[1]%% *}" = "$np" ] ||
  { cat "$work/lost.log"; fail "want worlds $np -> $((np - 1)) -> $np, the events say: ${changes[*]}"; }
echo "the lost run's worlds: $np from step 0, $((np - 1)) from step ${changes[0]#* }, $np from step ${changes[1]#* }"

# 3. The reference: a checkpoint after every step; each segment resumes from the previous one's at its first step,
# and stops (--stop-after, which leaves the schedule as it is) after the epoch its last step is in. The launch
# world's global batch is kept, so an epoch has the same steps at every world: the train set's size over it.
per_epoch=$(steps_per_epoch $((8 * np))) || exit 1
epoch_of() { echo $(($1 / per_epoch)); }  # STEP: the epoch (from 0) a step's checkpoint is written in
segment() {  # OUT WORLD EPOCHS [FROM_DIR STEP]: EPOCHS to run (0: to the end)
  local out=$1 world=$2 more=()
  [ "$3" = 0 ] || more=(--stop-after "$3")
  shift
  if [ $# -gt 2 ]; then
    mkdir -p "$out/checkpoints"
    local name
    name=$(cd "$3/checkpoints" && ls | grep -E "^checkpoint-e[0-9]+-s0*$4\.pt$" | tail -1)
    [ -n "$name" ] || fail "no checkpoint at step $4 in $3/checkpoints"
    cp "$3/checkpoints/$name" "$out/checkpoints/" && echo "$name" > "$out/checkpoints/latest"
    more+=(--resume)
  fi
  "$ddprun" --standalone --nproc-per-node "$world" --recovery inplace "$train" "${args[@]}" --checkpoint-every 1 \
    --keep-last 100000 --no-async-save "${more[@]}" --out-dir "$out" > "$out.log" 2>&1 ||
    { cat "$out.log"; fail "the reference segment at world $world"; }
}
first=${changes[0]#* } second=${changes[1]#* }
segment "$work/ref0" "$np" $(($(epoch_of "$first") + 1))
# (one epoch more than the count from the resumed epoch: a step at an epoch's end may resume as that epoch's)
segment "$work/ref1" $((np - 1)) $(($(epoch_of "$second") + 2 - $(epoch_of "$first"))) "$work/ref0" "$first"
grep -q "global batch $((8 * np)) samples (launch world $np) kept from" "$work/ref1.log" ||
  { cat "$work/ref1.log"; fail "the resumed world $((np - 1)) did not keep the launch world's global batch"; }
segment "$work/ref2" "$np" 0 "$work/ref1" "$second"

# 4. Bit for bit.
"$python" - "$(latest "$work/ref2")" "$(latest "$work/lost")" <<'PY'
import sys, torch
ref, lost = torch.load(sys.argv[1]), torch.load(sys.argv[2])
if (ref["step"], ref["epoch"]) != (lost["step"], lost["epoch"]):
    sys.exit("FAIL: the lost run ended at step %d, epoch %d; the reference at step %d, epoch %d"
             % (lost["step"], lost["epoch"], ref["step"], ref["epoch"]))
def tensors(prefix, v):
    if isinstance(v, torch.Tensor):
        yield prefix, v
    elif isinstance(v, dict):
        for k in sorted(v, key=str):
            yield from tensors("%s.%s" % (prefix, k), v[k])
    elif isinstance(v, (list, tuple)):
        for i, e in enumerate(v):
            yield from tensors("%s[%d]" % (prefix, i), e)
a = dict(tensors("model", ref["model"])); a.update(tensors("optimizer", ref["optimizer"]["state"]))
b = dict(tensors("model", lost["model"])); b.update(tensors("optimizer", lost["optimizer"]["state"]))
if a.keys() != b.keys():
    sys.exit("FAIL: the checkpoints hold other tensors: %s" % sorted(set(a) ^ set(b)))
differ = [k for k in a if not torch.equal(a[k], b[k])]
if differ:
    sys.exit("FAIL: %d of %d tensors differ from the reference's, first %s" % (len(differ), len(a), differ[0]))
print("equal to the replayed reference to the bit: %d tensors (model and optimizer state), step %d"
      % (len(a), ref["step"]))
PY
