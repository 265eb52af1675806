#!/usr/bin/env bash
# A LibTorch with CUDA but no NCCL headers to build against (LibTorch's cu* archive beside a CUDA toolkit without
# NCCL), or -DDDP_WITH_NCCL=OFF: ddp's CUDA parts (device.cpp, tensor_memory.cpp's allocator statistics) still
# build and link under --no-undefined, without the nccl backend. Where this line's LibTorch has no CUDA (Debian's
# 1.13) there is nothing to build: exit 77, a skip.
# Usage: cuda_without_nccl_test.sh SOURCE_DIR WORK_DIR   (DDP_PYTHON: the python whose torch this build links;
# WORK_DIR under the source tree, so that ccache's base directory covers it)
set -euo pipefail
src=$1
work=$2
py=${DDP_PYTHON:?DDP_PYTHON unset: run through ctest}
prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
[ -f "$prefix/Torch/TorchConfig.cmake" ] || { echo "skip: $py's torch has no CMake files (Debian's 1.13)"; exit 77; }
"$py" -c 'import sys, torch; sys.exit(torch.version.cuda is None)' || { echo "skip: $py's torch has no CUDA"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
if ! cmake -S "$src" -B "$work" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DDDP_PYTHON="$py" \
  -DDDP_WITH_NCCL=OFF -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_EXAMPLES=OFF >"$work/configure.log" 2>&1; then
  echo "FAIL: configure:"; tail -20 "$work/configure.log"; exit 1
fi
summary=$(grep -m1 'ddp backends:' "$work/configure.log")
echo "$summary"
grep -q 'nccl=OFF' <<<"$summary" || { echo "FAIL: -DDDP_WITH_NCCL=OFF still builds the nccl backend"; exit 1; }
grep -q 'CUDA ON' <<<"$summary" || { echo "FAIL: CUDA's parts are off with a CUDA LibTorch"; exit 1; }
if ! ninja -C "$work" ddp_dist >"$work/build.log" 2>&1; then
  echo "FAIL: libddp_dist with CUDA and without NCCL:"; grep -E 'error|undefined' "$work/build.log" | head -20; exit 1
fi
lib=$(ls "$work"/lib/libddp_dist.so)
ldd "$lib" | grep -q 'libc10_cuda' || { echo "FAIL: $lib does not link libc10_cuda"; exit 1; }
rm -rf "$work"
echo "ok: libddp_dist builds with CUDA and without NCCL"
