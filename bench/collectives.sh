#!/usr/bin/env bash
# Collective bandwidth of ddp's backends beside their peers, in one run:
# gloo against PyTorch's Python gloo (python3-torch) and against c10d's
# ProcessGroupGloo called directly in the same processes, mpi against plain
# OpenMPI calls in the same processes (alternating per size, best of 3).
# Usage: bench/collectives.sh [nproc] [out dir]
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-2}
OUT=${2:-build/bench}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
RUN="build/bin/ddprun --nproc-per-node $NP --standalone"
# Ours and PyTorch's alternate, twice; the fastest run of each size counts.
# (torchrun of python3-torch 1.13 fails under Python 3.11; ddprun sets the same variables.)
for round in 1 2; do
  $RUN --backend gloo build/bin/ddp-bench collectives --backend gloo --rounds 1 --json "$OUT/ddp-gloo-$round.json" >/dev/null
  $RUN ${DDP_PYTHON:-/usr/bin/python3} bench/collectives_peer.py --json "$OUT/torch-gloo-$round.json" 2>/dev/null
done
echo "## gloo: ddp vs PyTorch (Python)"
${DDP_PYTHON:-/usr/bin/python3} bench/compare_collectives.py "$OUT/ddp-gloo-1.json,$OUT/ddp-gloo-2.json" \
  "$OUT/torch-gloo-1.json,$OUT/torch-gloo-2.json"
# The same engine without Python, in the same processes, alternating per size:
# what ddp's gloo backend adds to c10d's ProcessGroupGloo, free of run-to-run drift.
$RUN --backend gloo build/bin/ddp-bench collectives --backend gloo --raw-c10d --min-bytes 1K \
  --json "$OUT/ddp-gloo-c10d.json" >/dev/null
echo "## gloo: ddp vs c10d's ProcessGroupGloo called directly"
${DDP_PYTHON:-/usr/bin/python3} bench/compare_collectives.py "$OUT/ddp-gloo-c10d.json"
if build/bin/ddp-bench collectives --help >/dev/null 2>&1 && [ -x "$(command -v mpirun)" ]; then
  $RUN --backend mpi build/bin/ddp-bench collectives --backend mpi --raw-mpi --json "$OUT/ddp-mpi.json" >/dev/null
  echo "## mpi: ddp vs plain OpenMPI calls"
  ${DDP_PYTHON:-/usr/bin/python3} bench/compare_collectives.py "$OUT/ddp-mpi.json"
fi
