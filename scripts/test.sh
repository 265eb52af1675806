#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest. Extra args go to ctest.
# DDP_TORCH=2: the same against LibTorch 2.x (PyPI's torch in build-torch2/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/torch-line.sh
install_deps
BUILD_DIR=$BUILD_DIR ./scripts/build.sh
cd "$BUILD_DIR"
export DDP_CHECK_HOOK_WAITS=1  # nothing may wait in a gradient hook (src/dist/hook_waits.h): checked in every test
ctest --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
