#!/usr/bin/env bash
# ZeRO-3 trains what DDP cannot fit (issue 12): Adam on a 105M-parameter MLP at world 4 (ddp-bench memory,
# --width 4096 --layers 8 --batch 8). Both modes run once without a limit to measure their peak virtual memory
# on this machine (the largest rank's VmPeak; libraries, thread stacks and glibc arenas vary by machine), then
# again under `ulimit -v` half way between the two: DDP must fail with an allocation error, ZeRO-3 must finish.
#   zero3_ulimit_test.sh DDPRUN DDP_BENCH
set -euo pipefail
ddprun=$1 bench=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One malloc arena per process: the peaks are what the ranks hold, not per-thread arenas' reservations.
export MALLOC_ARENA_MAX=1 OMP_NUM_THREADS=1
run() {  # MODE JSON: world 4 over gloo
  "$ddprun" --nproc-per-node 4 --standalone --backend gloo "$bench" memory --mode "$1" \
    --width 4096 --layers 8 --batch 8 --steps 2 --json "$2"
}
peak() { ${DDP_PYTHON:-/usr/bin/python3} -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["peak_vm_bytes"]))' "$1"; }

run ddp "$work/ddp.json" >"$work/ddp.log" 2>&1 || { cat "$work/ddp.log"; echo "FAIL: DDP without a limit"; exit 1; }
run zero3 "$work/zero3.json" >"$work/zero3.log" 2>&1 || { cat "$work/zero3.log"; echo "FAIL: ZeRO-3 without a limit"; exit 1; }
ddp_vm=$(peak "$work/ddp.json") zero_vm=$(peak "$work/zero3.json")
echo "peak virtual memory per rank: DDP $((ddp_vm >> 20)) MiB, ZeRO-3 $((zero_vm >> 20)) MiB"
# The limit must leave each side a margin of at least 10% of ZeRO-3's peak, else the test could not tell.
(( ddp_vm - zero_vm > zero_vm / 5 )) || { echo "FAIL: ZeRO-3's peak is not well below DDP's"; exit 1; }
limit_kb=$(( (ddp_vm + zero_vm) / 2 / 1024 ))
echo "ulimit -v $limit_kb (KiB)"

set +e
( ulimit -v "$limit_kb"; run ddp "$work/ddp-limited.json" ) >"$work/ddp-limited.log" 2>&1
ddp_rc=$?
( ulimit -v "$limit_kb"; run zero3 "$work/zero3-limited.json" ) >"$work/zero3-limited.log" 2>&1
zero_rc=$?
set -e
if (( ddp_rc == 0 )); then cat "$work/ddp-limited.log"; echo "FAIL: DDP fit under the limit"; exit 1; fi
grep -Eqi "can't allocate memory|bad_alloc|cannot allocate memory|out of memory" "$work/ddp-limited.log" ||
  { cat "$work/ddp-limited.log"; echo "FAIL: DDP failed (exit $ddp_rc) but not for memory"; exit 1; }
if (( zero_rc != 0 )); then cat "$work/zero3-limited.log"; echo "FAIL: ZeRO-3 did not train under the limit (exit $zero_rc)"; exit 1; fi
echo "DDP under the limit: exit $ddp_rc; its first error line:"
grep -Ei -m1 "can't allocate memory|bad_alloc|cannot allocate memory|out of memory" "$work/ddp-limited.log"
grep "per rank" "$work/zero3-limited.log" | sed 's/^\[rank 0\] //'
echo "ok: ZeRO-3 trains at world 4 within a limit DDP cannot"
