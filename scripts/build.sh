#!/usr/bin/env bash
# Configures and builds into build/ (BUILD_DIR to change). Extra args go to cmake.
# BUILD_TARGETS="ddprun ddp-train" builds only those (and what they need).
# DDP_TORCH=2 builds against the venv's LibTorch 2.x into build-torch2/ (scripts/torch-line.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch-line.sh
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # shellcheck disable=SC2046
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release $(torch_cmake_args) "$@"
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
