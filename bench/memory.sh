#!/usr/bin/env bash
# Memory per rank of Adam training under DDP, ZeRO-1, ZeRO-2 and ZeRO-3 at
# worlds 1-4: the table "Memory: DDP and ZeRO" of docs/benchmarks.md.
# Usage: bench/memory.sh [BUILD_DIR [EXTRA ddp-bench memory ARGS...]]
# (default: the wide MLP, 10.5M parameters; e.g. "--width 4096 --layers 8 --batch 8" for 105M)
set -euo pipefail
build=${1:-build}
shift || true
for world in 1 2 3 4; do
  for mode in ddp zero1 zero2 zero3; do
    # A fixed mmap threshold: freed large blocks go back to the system, so peak
    # RSS shows what is held at once rather than glibc's heap growth.
    MALLOC_MMAP_THRESHOLD_=1048576 OMP_NUM_THREADS=1 "$build/bin/ddprun" --nproc-per-node "$world" --standalone \
      --backend gloo "$build/bin/ddp-bench" memory --mode "$mode" "$@" 2>&1 | grep -E "cpu:|memory:|per rank" |
      sed 's/^\[rank 0\] //'
  done
done
