#!/usr/bin/env bash
# Installs, builds, and runs the main job on 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
exec build/bin/ddprun --nproc-per-node 2 --standalone build/bin/matmul_partition "$@"
