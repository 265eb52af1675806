#!/usr/bin/env bash
# Faults around ddp-train's checkpoints, each checked by what the user sees and what is kept:
#  1. a flipped bit in the newest checkpoint: named, the one before it used; all corrupt: a clear error
#  2. a gradient that becomes NaN/inf: the run stops naming step and parameter; `latest` keeps the finite model
#     (also read a step later, --nan-check-at next-step: its update applied, never saved; with --no-nan-check: the
#     non-finite model is refused at the save); changed settings are listed
#  3. a mid-epoch resume: the epoch's train loss equals the uninterrupted run's (the running sums are saved)
#  4. resuming a finished run: says so and prints the final model's metrics, equal to the run's own
#  5. a temporary file left by a killed save is removed at the next start
#  6. a label outside the classes: the labels file and the record are named
# usage: fault_test.sh DDPRUN DDP_TRAIN NPROC
set -euo pipefail
ddprun=$1 train=$2 np=$3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
# --backend gloo: the summaries checked below name pids and local ranks, which mpirun does not report.
run() { "$ddprun" --nproc-per-node "$np" --standalone --backend gloo "$train" "$recipe" "${data[@]}" --no-progress --batch-size 16 "$@"; }
expect_failure() { if run "$@" > "$work/log" 2>&1; then cat "$work/log"; fail "the run succeeded"; fi; }
has() { grep -qF -- "$1" "$work/log" || { cat "$work/log"; fail "the output lacks: $1"; }; }

# A finished 2-epoch run, every checkpoint kept: e0001 (after epoch 1) and e0002.
run --epochs 2 --keep-last 10 --out-dir "$work/a" > "$work/a.log" 2>&1 || { cat "$work/a.log"; fail "first run"; }
ck=$work/a/checkpoints
e1=$(ls "$ck"/checkpoint-e0001-*.pt) e2=$(ls "$ck"/checkpoint-e0002-*.pt)

# 4. Resuming the finished run: nothing trained, the final model's metrics printed, equal to the run's.
run --epochs 2 --keep-last 10 --out-dir "$work/a" --resume > "$work/log" 2>&1 || { cat "$work/log"; fail "resume of a finished run"; }
has "is already finished: 2 of 2 epoch(s) done"
want=$(sed -n 's/^\[rank 0\] done: \(acc1 [0-9.]*%\) on \([0-9]*\) test samples.*/\1 \2/p' "$work/a.log")
got=$(sed -n 's/.*its final model: \(acc1 [0-9.]*%\), acc5 .* on \([0-9]*\) test samples$/\1 \2/p' "$work/log")
[ -n "$want" ] && [ "$want" = "$got" ] || { cat "$work/log"; fail "final metrics '$got', the run printed '$want'"; }
grep -q "^\[rank 0\] epoch " "$work/log" && fail "a finished run trained again"

# 1. One flipped bit inside the newest checkpoint's first tensor record.
${DDP_PYTHON:-/usr/bin/python3} - "$e2" <<'PY'
import sys, zipfile
path = sys.argv[1]
z = zipfile.ZipFile(path)
info = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
with open(path, "rb") as f:
    raw = bytearray(f.read())
name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
    int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
raw[at] ^= 0x10
with open(path, "wb") as f:
    f.write(raw)
assert zipfile.ZipFile(path).testzip() == info.filename  # Python's zipfile agrees that it is corrupt
PY
run --epochs 3 --keep-last 10 --out-dir "$work/a" --resume > "$work/log" 2>&1 || { cat "$work/log"; fail "resume past a corrupt checkpoint"; }
has "$e2: corrupt checkpoint: record '"
has "fails its check: CRC error"
has "warning: checkpoint $e2 is unusable; trying the one before it, $e1"
has "resumed from $e1 at epoch 2"
has "(an older checkpoint: the newer ones are corrupt, see above)"
grep -q "^\[rank 0\] epoch 3/3" "$work/log" || { cat "$work/log"; fail "did not train on to epoch 3"; }
# Every checkpoint corrupt: an error naming the directory, nothing trained.
for f in "$ck"/checkpoint-*.pt; do printf 'garbage' | dd of="$f" bs=1 seek=40 conv=notrunc status=none; done
expect_failure --epochs 4 --keep-last 10 --out-dir "$work/a" --resume
has "none of the 3 checkpoint(s) in $ck is readable"

# 2. A learning rate that blows the weights up: stopped before a non-finite step; latest unchanged.
run --epochs 1 --out-dir "$work/b" > "$work/log" 2>&1 || { cat "$work/log"; fail "run b"; }
before=$(cat "$work/b/checkpoints/latest")
expect_failure --epochs 2 --out-dir "$work/b" --resume --lr 1e30
has "warning: resuming $work/b/checkpoints/$before with settings that differ from the checkpoint's:"
has "  lr: 0.02 -> 1e+30"
has "  epochs: 1 -> 2"
has "the gradients are not finite at epoch 2, step "
has "first non-finite gradient: "
has "the weights were not updated and no checkpoint was written (the last: $work/b/checkpoints/$before)"
bad_step=$(grep -o "the gradients are not finite at epoch 2, step [0-9]*" "$work/log" | head -1)
[ -n "$bad_step" ] || fail "no step named"
[ "$(cat "$work/b/checkpoints/latest")" = "$before" ] || fail "latest changed"
[ "$(ls "$work/b/checkpoints" | grep -c '\.pt$')" = 1 ] || fail "a checkpoint was written"
# Read a step later (a GPU's default): the same step named, its update applied and never saved.
expect_failure --epochs 2 --out-dir "$work/b" --resume --lr 1e30 --nan-check-at next-step
has "$bad_step ("
has "its update was applied (--nan-check-at next-step reads the check a step later) and no checkpoint was written since (the last: $work/b/checkpoints/$before)"
[ "$(cat "$work/b/checkpoints/latest")" = "$before" ] || fail "latest changed"
[ "$(ls "$work/b/checkpoints" | grep -c '\.pt$')" = 1 ] || fail "a checkpoint was written"
# Without the check, the non-finite model reaches the save, which refuses it.
expect_failure --epochs 2 --out-dir "$work/b" --resume --lr 1e30 --no-nan-check
has "the model is not finite after epoch 2, step "
has "no checkpoint written, the last one is $work/b/checkpoints/$before"
[ "$(cat "$work/b/checkpoints/latest")" = "$before" ] || fail "latest changed"

# 3. A checkpoint in the middle of epoch 2, resumed alone: epoch 2's train loss equals the whole run's.
run --epochs 2 --keep-last 10 --checkpoint-every 3 --out-dir "$work/c" > "$work/c.log" 2>&1 || { cat "$work/c.log"; fail "run c"; }
steps=$(sed -n 's/.* \([0-9]*\) steps per epoch.*/\1/p' "$work/c.log")
mid=$(ls "$work/c/checkpoints"/checkpoint-e0001-*.pt | while read -r f; do
  s=${f##*-s}; s=$((10#${s%.pt})); [ "$s" -gt "$steps" ] && echo "$f"; done | head -n1)
[ -n "$mid" ] || fail "no checkpoint inside epoch 2 ($steps steps per epoch)"
mkdir -p "$work/d/checkpoints"
cp "$mid" "$work/d/checkpoints/"
run --epochs 2 --keep-last 10 --checkpoint-every 3 --out-dir "$work/d" --resume > "$work/log" 2>&1 || { cat "$work/log"; fail "run d"; }
loss() { sed -n 's/^\[rank 0\] epoch 2\/2 | train_loss \([^ ]*\) .*/\1/p' "$1"; }
[ -n "$(loss "$work/c.log")" ] && [ "$(loss "$work/c.log")" = "$(loss "$work/log")" ] ||
  fail "epoch 2 train_loss after a mid-epoch resume: $(loss "$work/log"), uninterrupted: $(loss "$work/c.log")"

# 5. A temporary file of a save killed mid-write (its pid no longer runs) is removed at the next start.
sh -c 'exit 0' & dead=$!; wait $dead
touch "$work/d/checkpoints/checkpoint-e0009-s00000999.pt.tmp.$dead"
run --epochs 2 --out-dir "$work/d" --resume > "$work/log" 2>&1 || { cat "$work/log"; fail "run d again"; }
has "removed $work/d/checkpoints/checkpoint-e0009-s00000999.pt.tmp.$dead, left by a save that was interrupted"
[ ! -e "$work/d/checkpoints/checkpoint-e0009-s00000999.pt.tmp.$dead" ] || fail "the temporary file is still there"

# 6. A label outside Fashion-MNIST's 10 classes, record 7 of the training labels.
${DDP_PYTHON:-/usr/bin/python3} - "$work/data/fashion/train-labels-idx1-ubyte.gz" <<'PY'
import gzip, sys
raw = bytearray(gzip.open(sys.argv[1]).read())
raw[8 + 7] = 12
with gzip.open(sys.argv[1], "wb") as f:
    f.write(raw)
PY
expect_failure --epochs 1 --out-dir "$work/e"
has "$work/data/fashion/train-labels-idx1-ubyte.gz: record 7 (counting from 0) has label 12, outside the 10 classes 0..9"
grep -q "frame #" "$work/log" && { cat "$work/log"; fail "a backtrace"; }
echo "fault_test: all cases passed"
