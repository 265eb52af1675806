#!/usr/bin/env bash
# The README's way to build against a user's LibTorch: configured with only
# -DCMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)'), the tests' oracle
# (DDP_PYTHON) is that python, so the interop tests compare against the same torch. Where DDP_PYTHON's torch has
# no CMake files (Debian's python3-torch: libtorch-dev has them), the plain configuration must pick Debian's.
# Usage: oracle_python_test.sh SOURCE_DIR   (DDP_PYTHON: the python whose torch this build links)
set -euo pipefail
src=$1
py=${DDP_PYTHON:?DDP_PYTHON unset: run through ctest}
work=$(mktemp -d /tmp/ddp-oracle-python-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
args=(-S "$src" -B "$work" -G Ninja -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_EXAMPLES=OFF)
if [ -f "$prefix/Torch/TorchConfig.cmake" ]; then
  args+=("-DCMAKE_PREFIX_PATH=$prefix")
  want=$(cd "$(dirname "$py")" && pwd)  # the venv's bin
else
  want=/usr/bin
fi
if ! cmake "${args[@]}" >"$work/configure.log" 2>&1; then
  echo "FAIL: cmake ${args[*]} failed:"; tail -20 "$work/configure.log"; exit 1
fi
got=$(sed -n 's/^DDP_PYTHON:FILEPATH=//p' "$work/CMakeCache.txt")
if [ "$(dirname "$got")" != "$want" ]; then
  echo "FAIL: configured the README's way (${args[*]:6}), DDP_PYTHON is '$got'; expected a python in $want"
  exit 1
fi
"$got" -c 'import torch' || { echo "FAIL: $got cannot import torch"; exit 1; }
echo "ok: the README's configuration runs the oracles with $got"
