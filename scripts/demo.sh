#!/usr/bin/env bash
# Installs, builds, and runs the main job: Fashion-MNIST to 90% and past it on
# 2 ranks (ddp-train fashion-mnist-fast: FashionNet, evaluated every eighth of
# an epoch), ending with where its logs, checkpoint and report page
# (runs/fashion-mnist-fast/report.html: open it in a browser) are.
# Extra arguments go to ddp-train (e.g. --epochs 5). DDP_TORCH=2: built against LibTorch 2.x.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch-line.sh   # DDP_TORCH=2: against LibTorch 2.x
install_deps
# What the demo runs, and ddp_spawn so that `cmake --install` finds every library the package exports; no tests.
BUILD_DIR=$BUILD_DIR BUILD_TARGETS="ddprun ddp-train ddp_spawn" ./scripts/build.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# ddprun's default --backend auto: mpi when OpenMPI is installed (its first line says which and why), else gloo.
exec "$BUILD_DIR/bin/ddprun" --nproc-per-node 2 --standalone "$BUILD_DIR/bin/ddp-train" fashion-mnist-fast "$@"
