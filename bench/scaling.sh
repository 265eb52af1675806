#!/usr/bin/env bash
# Scaling: training throughput at world 2 over world 1, same batch per rank, 1 thread
# per rank, the two worlds alternating for ROUNDS rounds (the best of each counts).
# ddp-train jobs: one epoch, samples/s of the epoch record; ddp-bench ddp: step time of
# the course MLP and FashionCNN on synthetic batches of 64 per rank, fp32.
# Usage: bench/scaling.sh [BIN] [ROUNDS]   (BIN: build/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
# CIFAR-10: CIFAR_DIR, else the course's copy (the recipe's own default is $DDP_DATA_DIR/cifar10, else ~/.cache/ddp).
CIFAR_DIR=${CIFAR_DIR:-../shared/data/cifar10}
BIN=${1:-build/bin}
ROUNDS=${2:-2}
OUT=build/bench/scaling
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=${DDP_PYTHON:-/usr/bin/python3}  # the peer: python3-torch 1.13, or a torch 2.x venv
run() {  # run NAME WORLD ARGS...: one measurement, its throughput (samples/s) on stdout
  local name=$1 world=$2; shift 2
  local dir="$OUT/$name-w$world-$RANDOM"
  if [ "$1" = ddp-bench ]; then
    shift
    "$BIN/ddprun" --nproc-per-node "$world" --standalone "$BIN/ddp-bench" ddp "$@" --json "$dir.json" >/dev/null 2>>"$OUT/stderr.log"
    $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['batch'] * d['world'] * 1000 / d['ms_per_step'])" "$dir.json"
  else
    "$BIN/ddprun" --nproc-per-node "$world" --standalone "$BIN/ddp-train" "$@" --epochs 1 --eval-every 0 \
      --out-dir "$dir" >/dev/null 2>>"$OUT/stderr.log"
    $PY -c "import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('kind')=='epoch': print(r['throughput'])" "$dir/metrics.jsonl"
  fi
}
JOBS=(
  "fashion-mnist-fast|fashion-mnist-fast --batch-size 64"
  "fashion-mnist|fashion-mnist --batch-size 64 --seed 1"
  "cifar10-airbench|cifar10-airbench --limit-train 20480 --limit-test 1000 --data-dir $CIFAR_DIR"
  "bench-mlp|ddp-bench --model mlp --steps 2000"
  "bench-cnn|ddp-bench --model cnn --steps 100 --warmup 10"
)
printf "| job | world 1 (samples/s) | world 2 (samples/s) | world 2 / world 1 |\n|---|---|---|---|\n"
for job in "${JOBS[@]}"; do
  name=${job%%|*}; args=${job#*|}
  best1=0; best2=0
  for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    t1=$(run "$name" 1 $args); t2=$(run "$name" 2 $args)
    best1=$($PY -c "print(max($best1, $t1))"); best2=$($PY -c "print(max($best2, $t2))")
  done
  $PY -c "print('| %s | %.0f | %.0f | **%.2fx** |' % ('$name', $best1, $best2, $best2 / $best1))"
done
