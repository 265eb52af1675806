#!/usr/bin/env bash
# A disk that fills up mid-run, a real one: --out-dir on a 16 MiB tmpfs, where the first checkpoint (11.5 MB) fits and
# the second does not. Rank 0's own error (No space left on device) heads the summary on every backend, not another
# rank's "rank 0 failed to save"; ddprun exits 1; the first checkpoint is kept, `latest` names it, no temporary is
# left. Needs root (mount); exits 77 (skipped) without it.
# usage: disk_full_test.sh DDPRUN DDP_TRAIN NPROC BACKEND
set -euo pipefail
ddprun=$1 train=$2 np=$3 backend=$4
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
disk=$work/disk
mkdir "$disk"
mount -t tmpfs -o size=16m tmpfs "$disk" || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
trap 'umount "$disk"; rm -rf "$work"' EXIT
rc=0
"$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$train" fashion-mnist "${data[@]}" --data sampler \
  --batch-size 16 --epochs 3 --no-progress --out-dir "$disk/run" > "$work/log" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$work/log"; fail "ddprun exited with $rc, not 1"; }
# The headline: rank 0 and its own message (its first line may be the save's description, then the errno text).
sed -n '/failure summary/,$p' "$work/log" | sed -n 2,4p > "$work/head"
grep -q '^ddprun: root cause: rank 0 (pid [0-9]*) reported the first error' "$work/head" &&
  grep -q 'No space left on device' "$work/head" || { cat "$work/log"; fail "the headline is not rank 0's disk-full error"; }
first=$(cd "$disk/run/checkpoints" && ls checkpoint-e0001-s*.pt)
checkpoints=$(cd "$disk/run/checkpoints" && ls -A)
[ "$checkpoints" = "$(printf '%s\nlatest' "$first")" ] ||
  { cat "$work/log"; fail "checkpoints left: $checkpoints (expected the first one and latest, no temporary)"; }
[ "$(cat "$disk/run/checkpoints/latest")" = "$first" ] || fail "latest: $(cat "$disk/run/checkpoints/latest")"
${DDP_PYTHON:-/usr/bin/python3} -c "import sys, torch; c = torch.load(sys.argv[1]); assert c['epoch'] == 1, c['epoch']" \
  "$disk/run/checkpoints/$first" || fail "the kept checkpoint does not load"
echo "disk_full_test ($backend, $np ranks): rank 0's No space left on device heads the summary; the first checkpoint is kept"
