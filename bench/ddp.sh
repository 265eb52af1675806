#!/usr/bin/env bash
# Training-step time of ddp's DDP beside PyTorch's Python DDP, in one run, on
# this machine: for each model, world 1 without and with DDP, and world 2 over
# gloo and mpi (1 thread per rank; mpi also with gradient_as_bucket_view off),
# with PyTorch's plain loop and DDP (gloo); and DDP's overhead at world 1
# measured in one process (ddp-bench ddp --pair).
# Each configuration runs ROUNDS times, alternating ours and PyTorch's; the
# best round is kept. Usage: bench/ddp.sh [models] [steps] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-"mlp wide cnn"}
STEPS=${2:-300}
ROUNDS=${3:-2}
OUT=build/bench/ddp
mkdir -p "$OUT"
rm -f "$OUT"/*.json
export OMP_NUM_THREADS=1
RUN1="build/bin/ddprun --nproc-per-node 1 --standalone"
RUN2="build/bin/ddprun --nproc-per-node 2 --standalone"
PY=${DDP_PYTHON:-/usr/bin/python3}  # the peer: python3-torch 1.13, or a torch 2.x venv
for model in $MODELS; do
  for round in $(seq "$ROUNDS"); do
    a="--model $model --steps $STEPS"
    $RUN1 build/bin/ddp-bench ddp $a --no-ddp --json "$OUT/$model-ours-w1-plain-$round.json" >/dev/null
    $RUN1 $PY bench/ddp_peer.py $a --no-ddp --json "$OUT/$model-torch-w1-plain-$round.json" >/dev/null
    $RUN1 build/bin/ddp-bench ddp $a --json "$OUT/$model-ours-w1-ddp-$round.json" >/dev/null
    $RUN1 $PY bench/ddp_peer.py $a --json "$OUT/$model-torch-w1-ddp-$round.json" >/dev/null
    $RUN2 --backend gloo build/bin/ddp-bench ddp $a --json "$OUT/$model-ours-w2-gloo-$round.json" >/dev/null
    $RUN2 $PY bench/ddp_peer.py $a --json "$OUT/$model-torch-w2-gloo-$round.json" >/dev/null
    $RUN2 --backend mpi build/bin/ddp-bench ddp $a --backend mpi --json "$OUT/$model-ours-w2-mpi-$round.json" >/dev/null
    $RUN2 --backend mpi build/bin/ddp-bench ddp $a --backend mpi --no-bucket-view --json "$OUT/$model-ours-w2-mpi-copies-$round.json" >/dev/null
    # DDP's own cost at world 1, plain and DDP alternating in one process.
    $RUN1 build/bin/ddp-bench ddp $a --pair --json "$OUT/$model-ours-w1-pair-$round.json" >/dev/null
  done
done
$PY bench/compare_ddp.py "$OUT" $MODELS
