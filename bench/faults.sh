#!/usr/bin/env bash
# The reliability probe: each fault of docs/reliability.md tried end to end with the shipped tools (ddprun, ddp-train,
# examples/mlp), on each backend. One markdown row per case and backend: ddprun's exit code, the seconds from the
# fault to ddprun's exit (or to the resume, for restarts), and the first line of the failure summary (else the
# error line). Cases that need root (disk-full, link-cut) are left out without it.
# usage: bench/faults.sh [BUILD_DIR] [BACKENDS] [CASES]
#   BACKENDS: default "gloo mpi"; CASES: default all of
#   kill stop preempt elastic inplace min-ranks disk-full corrupt-checkpoint corrupt-data mismatch bad-input unreachable link-cut
set -uo pipefail
build=$(cd "${1:-build}" && pwd) backends=${2:-gloo mpi}
cases=${3:-kill stop preempt elastic inplace min-ranks disk-full corrupt-checkpoint corrupt-data mismatch bad-input unreachable link-cut}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${DDP_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'mountpoint -q "$work/disk" && umount "$work/disk"; rm -rf "$work"' EXIT
"$py" "$here/tests/train/make_tiny_data.py" "$work/data" > /dev/null
np=${NP:-2}
export OMP_NUM_THREADS=1

now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.2f", $1 - $2}'; }
# The summary's first line after its header, else the last "ddp-train:"/"mlp:" error line; cut for the table.
headline() {
  local l
  l=$(sed -n '/failure summary/{n;p;q}' "$1" | sed 's/^ddprun: //')
  case $l in *:) l="$l $(sed -n '/failure summary/{n;n;p;q}' "$1" | sed 's/^ddprun: *//')" ;; esac  # and its message
  [ -n "$l" ] || l=$(grep -E '^(\[rank [0-9]+\] )?(ddp-train|ddprun|mlp): ' "$1" | grep -v 'ddp-train [a-z0-9-]*: [0-9]' | tail -1)
  echo "$l" | sed 's/|/\\|/g; s/(pid [0-9]*)/(pid N)/g; s/[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]*/T/g' | cut -c1-200
}
row() { echo "| $1 | $2 | $3 | $4 | $5 |"; }
# launch LOG ARGS...: ddprun in the background ($launcher), its output in LOG.
launch() {
  local log=$1
  shift
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone "$@" > "$log" 2>&1 &
  launcher=$!
}
# wait_line LOG TEXT: until LOG has TEXT (60 s at most).
wait_line() { for _ in $(seq 600); do grep -q -- "$2" "$1" && return 0; sleep 0.1; done; return 1; }
# rank_pid R TAG: the pid of rank R of the run whose --out-dir contains TAG.
rank_pid() {
  local p
  for p in $(pgrep -f "^$build/bin/ddp-train .*$2"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qE "^(RANK|OMPI_COMM_WORLD_RANK)=$1\$" && { echo "$p"; return; }
  done
}
finish() { rc=0; wait "$launcher" || rc=$?; }
# kill_until LOG TAG TEXT: once LOG has "epoch 2/", SIGKILLs rank 1 of TAG's run; sets $took to the seconds until
# LOG has TEXT (60 s at most), then waits for ddprun ($rc).
kill_until() {
  wait_line "$1" "epoch 2/"
  kill -9 "$(rank_pid 1 "$2")"
  local t=$(now)
  for _ in $(seq 6000); do grep -q -- "$3" "$1" && break; sleep 0.01; done
  took=$(since "$t")
  finish
}
train() { echo "$build/bin/ddp-train" "$@" --no-progress; }

case_kill() {  # SIGKILL of rank 1 mid-training
  launch "$work/kill.log" --backend "$1" $(train mlp --epochs 1000 --out-dir "$work/kill-$1")
  wait_line "$work/kill.log" "epoch 2/"
  kill -9 "$(rank_pid 1 "kill-$1")"
  local t=$(now)
  finish
  row "rank 1 SIGKILLed" "$1" "$rc" "$(since "$t") s to ddprun's exit" "$(headline "$work/kill.log")"
}
case_stop() {  # SIGSTOP of rank 1, --heartbeat-timeout 2
  launch "$work/stop.log" --backend "$1" --heartbeat-timeout 2 $(train mlp --epochs 1000 --out-dir "$work/stop-$1")
  wait_line "$work/stop.log" "epoch 2/"
  kill -STOP "$(rank_pid 1 "stop-$1")"
  local t=$(now)
  finish
  row "rank 1 SIGSTOPped (--heartbeat-timeout 2)" "$1" "$rc" "$(since "$t") s to ddprun's exit" "$(headline "$work/stop.log")"
}
case_preempt() {  # SIGTERM to ddprun: the ranks finish the step, checkpoint, exit 75
  launch "$work/pre.log" --backend "$1" $(train mlp --epochs 1000 --out-dir "$work/pre-$1")
  wait_line "$work/pre.log" "epoch 2/"
  kill -TERM "$launcher"
  local t=$(now)
  finish
  row "SIGTERM to ddprun (preemption)" "$1" "$rc" "$(since "$t") s to ddprun's exit" \
    "$(grep -o 'preempted (SIGTERM): stopped after step [0-9]*' "$work/pre.log" | head -1); $(grep -o 'the ranks were preempted[^;]*' "$work/pre.log")"
}
case_elastic() {  # SIGKILL of rank 1 with --max-restarts 1: every rank restarts from the last checkpoint
  launch "$work/el.log" --backend "$1" --max-restarts 1 $(train mlp --epochs 12 --checkpoint-every 20 --out-dir "$work/el-$1")
  kill_until "$work/el.log" "el-$1" "resumed from"
  row "rank 1 SIGKILLed, --max-restarts 1" "$1" "$rc" "$took s to the resume" \
    "$(grep -o 'resumed from [^ ]*' "$work/el.log" | head -1 | sed 's|.*/||'); $(grep -o 'attempt 1 succeeded.*' "$work/el.log")"
}
case_inplace() {  # SIGKILL of rank 1 with --recovery inplace: the survivors go on from their memory
  [ "$1" = gloo ] || { row "rank 1 SIGKILLed, --recovery inplace" "$1" 2 - "refused: OpenMPI's communicators cannot survive a lost rank"; return; }
  launch "$work/ip.log" --backend "$1" --recovery inplace $(train mlp --epochs 12 --data sampler --out-dir "$work/ip-$1")
  kill_until "$work/ip.log" "ip-$1" "in-place recovery"
  row "rank 1 SIGKILLed, --recovery inplace" "$1" "$rc" "$took s to going on (0 steps redone)" \
    "$(grep -o 'in-place recovery: world [^(]*' "$work/ip.log" | head -1)$(grep -o 'going on from step [0-9]* ([^)]*) in [0-9.]* s' "$work/ip.log" | head -1); $(grep -o 'lost rank(s) .*' "$work/ip.log")"
}
case_min_ranks() {  # the same kill below --min-ranks: the survivors save the committed state, every rank restarts
  [ "$1" = gloo ] || { row "rank 1 SIGKILLed, --recovery inplace --min-ranks" "$1" 2 - "refused: OpenMPI's communicators cannot survive a lost rank"; return; }
  launch "$work/mr.log" --backend "$1" --recovery inplace --min-ranks "$np" --max-restarts 1 $(train mlp --epochs 12 --data sampler --out-dir "$work/mr-$1")
  kill_until "$work/mr.log" "mr-$1" "resumed from"
  row "rank 1 SIGKILLed, --recovery inplace --min-ranks $np --max-restarts 1" "$1" "$rc" "$took s to the resume (0 steps redone)" \
    "$(grep -o 'preempted (SIGTERM): stopped after step [0-9]*' "$work/mr.log" | head -1); $(grep -o 'resumed from [^ ]* at epoch [0-9]*, step [0-9]*' "$work/mr.log" | head -1 | sed 's|from .*/|from |'); $(grep -o 'attempt 1 succeeded.*' "$work/mr.log")"
}
case_disk_full() {  # --out-dir on a 16 MiB tmpfs: the second checkpoint does not fit
  [ "$(id -u)" = 0 ] || { row "disk full" "$1" - - "skipped: needs root"; return; }
  mkdir -p "$work/disk" && mount -t tmpfs -o size=16m tmpfs "$work/disk"
  local t=$(now)
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$1" $(train fashion-mnist --data-dir "$work/data/fashion" \
    --data sampler --batch-size 16 --epochs 3 --out-dir "$work/disk/run") > "$work/disk.log" 2>&1
  rc=$?
  local kept=$(ls "$work/disk/run/checkpoints" | tr '\n' ' ')
  umount "$work/disk"
  row "disk full at the second checkpoint" "$1" "$rc" "$(since "$t") s whole run; left: $kept" "$(sed -n '/root cause/{n;p;q}' "$work/disk.log" | grep -o 'No space left on device' | sed 's/^/rank 0: /')"
}
case_corrupt_checkpoint() {  # one flipped bit in the newest checkpoint, then --resume
  local args=(mlp --keep-last 5 --out-dir "$work/cc-$1")
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$1" $(train "${args[@]}" --epochs 2) > /dev/null 2>&1
  local newest="$work/cc-$1/checkpoints/$(cat "$work/cc-$1/checkpoints/latest")"
  "$py" - "$newest" <<'PY'
import sys, zipfile
path = sys.argv[1]
info = next(i for i in zipfile.ZipFile(path).infolist() if i.filename.endswith("/data/0"))
raw = bytearray(open(path, "rb").read())
n, e = (int.from_bytes(raw[info.header_offset + k:info.header_offset + k + 2], "little") for k in (26, 28))
raw[info.header_offset + 30 + n + e + info.file_size // 2] ^= 0x10
open(path, "wb").write(raw)
PY
  local t=$(now)
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$1" $(train "${args[@]}" --epochs 3 --resume) \
    > "$work/cc.log" 2>&1
  rc=$?
  row "a flipped bit in the newest checkpoint, --resume" "$1" "$rc" "$(since "$t") s whole run" \
    "$(grep -o 'unusable; trying the one before it' "$work/cc.log" | head -1); $(grep -o 'resumed from [^ ]*' "$work/cc.log" | sed 's|.*/||')"
}
case_corrupt_data() {  # label 12 in a 10-class data set
  cp -r "$work/data/fashion" "$work/bad"
  "$py" - "$work/bad/train-labels-idx1-ubyte.gz" <<'PY'
import gzip, sys
raw = bytearray(gzip.open(sys.argv[1]).read())
raw[8 + 7] = 12
gzip.open(sys.argv[1], "wb").write(raw)
PY
  local t=$(now)
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$1" $(train fashion-mnist --data-dir "$work/bad" \
    --epochs 1 --out-dir "$work/cd-$1") > "$work/cd.log" 2>&1
  rc=$?
  rm -rf "$work/bad"
  row "a label outside the classes" "$1" "$rc" "$(since "$t") s whole run" "$(headline "$work/cd.log" | sed "s|$work/||g")"
}
case_mismatch() {  # examples/mlp with a different --niters per rank: a collective mismatch
  local t=$(now)
  printf '#!/bin/sh\nexec "%s" --niters $((20 + 3 * ${RANK:-$OMPI_COMM_WORLD_RANK})) --train-size 2000\n' "$build/bin/mlp" \
    > "$work/rank.sh"
  chmod +x "$work/rank.sh"
  "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$1" "$work/rank.sh" > "$work/mm.log" 2>&1
  rc=$?
  row "ranks call different collectives" "$1" "$rc" "$(since "$t") s whole run" "$(headline "$work/mm.log")"
}
case_bad_input() {  # numbers and limits checked before anything starts
  local out
  if [ "$1" = gloo ]; then  # no group yet
    out=$("$build/bin/ddp-train" mlp --lr inf 2>&1 | tail -1)
    row "ddp-train mlp --lr inf" - "$("$build/bin/ddp-train" mlp --lr inf > /dev/null 2>&1; echo $?)" "at once" "$out"
  fi
  out=$("$build/bin/ddprun" --nproc-per-node 1000 --standalone --backend "$1" true 2>&1 | tail -1)
  row "ddprun --nproc-per-node 1000 on $(getconf _NPROCESSORS_ONLN) cores" "$1" "$("$build/bin/ddprun" --nproc-per-node 1000 --standalone --backend "$1" true > /dev/null 2>&1; echo $?)" "at once" "$(echo "$out" | cut -c1-200)"
}
case_unreachable() {  # a master that never comes, --rdzv-timeout 3
  [ "$1" = gloo ] || { row "unreachable master" "$1" - - "n/a: ddprun's mpi mode runs one node"; return; }
  local t=$(now)
  "$build/bin/ddprun" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.2 --master-port 29877 \
    --rdzv-timeout 3 $(train mlp --epochs 1 --out-dir "$work/un") > "$work/un.log" 2>&1
  rc=$?
  row "unreachable master (--rdzv-timeout 3)" "$1" "$rc" "$(since "$t") s whole run" "$(headline "$work/un.log")"
}
case_link_cut() {  # across network-namespace hosts (tests/multinode/multinode_faults_test.sh, its own timings)
  [ "$1" = gloo ] || return  # the script runs gloo and mpi
  [ "$(id -u)" = 0 ] || { row "link cut across hosts" "gloo, mpi" - - "skipped: needs root"; return; }
  "$here/tests/multinode/multinode_faults_test.sh" "$build/bin" > "$work/lc.log" 2>&1
  rc=$?
  row "link cut across hosts (netns)" "gloo, mpi" "$rc" "$(grep -E 'link cut|agent killed' "$work/lc.log" | tr '\n' ';')" "see docs/reliability.md, several hosts"
}

echo "| fault | backend | exit | time | what the user sees first |"
echo "|---|---|---|---|---|"
for c in $cases; do
  for b in $backends; do
    if [ "$b" = mpi ] && ! command -v mpirun > /dev/null; then row "$c" mpi - - "skipped: no mpirun"; continue; fi
    "case_${c//-/_}" "$b"
  done
done
echo
echo "$np ranks, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, $(date -u +%F)"
