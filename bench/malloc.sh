#!/usr/bin/env bash
# What glibc's malloc settings cost a training step: ddp-bench ddp (world 1, no DDP,
# fp32, batch 64, 1 thread) with ddp's setting (keep_freed_memory) and with glibc's
# defaults (DDP_MALLOC=system), beside PyTorch's Python loop (bench/ddp_peer.py) as it
# comes and with the same thresholds through GLIBC_TUNABLES. Rounds alternate; each cell is
# the best and the worst round (glibc's own threshold moves, so its runs differ by up to 20%).
# Usage: bench/malloc.sh [models] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-"cnn mlp"}
ROUNDS=${2:-3}
OUT=build/bench/malloc
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=${DDP_PYTHON:-/usr/bin/python3}  # the peer: python3-torch 1.13, or a torch 2.x venv
RUN1="build/bin/ddprun --nproc-per-node 1 --standalone"
SAME=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647
grep -m1 "model name" /proc/cpuinfo
echo "| model | ddp (kept), ms/step best-worst | ddp, glibc defaults | PyTorch | PyTorch + GLIBC_TUNABLES | defaults / kept, worst rounds |"
echo "|---|---|---|---|---|---|"
for m in $MODELS; do
  steps=100; [ "$m" = mlp ] && steps=2000
  a="--model $m --steps $steps --warmup 10 --no-ddp"
  for r in $(seq "$ROUNDS"); do
    $RUN1 build/bin/ddp-bench ddp $a --json "$OUT/$m-kept-$r.json" >/dev/null 2>>"$OUT/stderr.log"
    DDP_MALLOC=system $RUN1 build/bin/ddp-bench ddp $a --json "$OUT/$m-system-$r.json" >/dev/null 2>>"$OUT/stderr.log"
    $RUN1 $PY bench/ddp_peer.py $a --json "$OUT/$m-torch-$r.json" >/dev/null 2>>"$OUT/stderr.log"
    GLIBC_TUNABLES=$SAME $RUN1 $PY bench/ddp_peer.py $a --json "$OUT/$m-torchtuned-$r.json" >/dev/null 2>>"$OUT/stderr.log"
  done
  $PY - "$OUT" "$m" <<'PY'
import glob, json, sys
out, m = sys.argv[1], sys.argv[2]
runs = {k: sorted(json.load(open(f))["ms_per_step"] for f in glob.glob(f"{out}/{m}-{k}-*.json"))
        for k in ("kept", "system", "torch", "torchtuned")}
cell = lambda k: f"{runs[k][0]:.2f}-{runs[k][-1]:.2f}"
print(f"| {m} | **{cell('kept')}** | {cell('system')} | {cell('torch')} | {cell('torchtuned')} | "
      f"{runs['system'][-1] / runs['kept'][-1]:.2f}x |")
PY
done
