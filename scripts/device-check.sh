#!/usr/bin/env bash
# The GPU check (issue "GPUs"), for a machine with a GPU that installs nothing (the device tool's):
#   here:  ./scripts/device-check.sh --pack      # what that machine lacks, copied into .device/ (git-ignored)
#   there: ./scripts/device-check.sh             # with .device carried along
# There it builds ddp against the machine's LibTorch (DEVICE_PYTHON's torch, default /opt/torch/.venv), runs
# the cuda-labelled tests, and writes a short report, device-report.md, with the logs into OUT (default
# device-out/). Everything inside DEVICE_CHECK_BUDGET seconds (default 480: 8 minutes).
# DEVICE_IGNORE_SYSTEM=1 hides /usr from CMake's searches, so that a rehearsal on a machine that has the
# packages proves .device/ holds all that the build finds.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=$PWD/.device
ARCH_LIB=/usr/lib/x86_64-linux-gnu

if [ "${1:-}" = --pack ]; then
  rm -rf "$DEV"
  mkdir -p "$DEV/usr/include" "$DEV/usr/share/cmake" "$DEV/usr/lib/x86_64-linux-gnu/cmake"
  # Header-only or static: Debian's gloo headers (c10d's ProcessGroupGloo.hpp; LibTorch carries gloo itself),
  # CLI11, nlohmann-json, toml++, GoogleTest, zlib's headers.
  cp -r /usr/include/{gloo,CLI,nlohmann,toml++,gtest,gmock} /usr/include/{zlib.h,zconf.h} "$DEV/usr/include/"
  cp -r /usr/share/cmake/{CLI11,nlohmann_json} "$DEV/usr/share/cmake/"
  cp -r $ARCH_LIB/cmake/{GTest,tomlplusplus} "$DEV/usr/lib/x86_64-linux-gnu/cmake/"
  cp $ARCH_LIB/lib{gtest,gtest_main,gmock,gmock_main}.a "$DEV/usr/lib/x86_64-linux-gnu/"
  du -sh "$DEV"
  exit 0
fi

[ -d "$DEV/usr/include/gloo" ] || { echo "device-check: no .device/ here: run ./scripts/device-check.sh --pack on the build machine and carry .device" >&2; exit 2; }
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET:-480}
left() { echo $((BUDGET - ($(date +%s) - START))); }
PY=${DEVICE_PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-$PWD/device-out}
BUILD=${DEVICE_BUILD:-build-device}
mkdir -p "$OUT"
REPORT=$OUT/device-report.md
log() { echo "$*" | tee -a "$REPORT"; }
: > "$REPORT"

TORCH_CMAKE=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
log "# ddp device check, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
log ""
log "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: none')"
log "- torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())')"
log "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

ZLIB_SO=$(ls $ARCH_LIB/libz.so $ARCH_LIB/libz.so.1 2>/dev/null | head -1)
ignore=()
[ "${DEVICE_IGNORE_SYSTEM:-0}" = 1 ] && ignore=(-DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local")
set +e
timeout "$(left)" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_CMAKE;$DEV/usr" -DDDP_PYTHON="$PY" "${ignore[@]}" \
  -DDDP_CUDA_TESTS_ONLY=ON -DDDP_BUILD_EXAMPLES=OFF \
  -DDDP_WITH_IMAGE_FOLDER=OFF -DDDP_WITH_REPORT=OFF -DDDP_WITH_CHECKPOINT_VERIFY=OFF \
  -DZLIB_INCLUDE_DIR="$DEV/usr/include" -DZLIB_LIBRARY="$ZLIB_SO" > "$OUT/configure.log" 2>&1
rc=$?
grep -E 'ddp:|ddp backends' "$OUT/configure.log" | sed 's/^-- /- /' | tee -a "$REPORT"
[ $rc = 0 ] || { log "configure FAILED ($rc): see configure.log"; tail -30 "$OUT/configure.log"; exit 1; }
t0=$(date +%s)
timeout "$(left)" cmake --build "$BUILD" -j "$(nproc)" --target test_cuda test_init suite_mp dist_probe ddprun ddp-train > "$OUT/build.log" 2>&1
rc=$?
log "- build: exit $rc in $(( $(date +%s) - t0 )) s"
[ $rc = 0 ] || { log "build FAILED: see build.log"; grep -B2 -A12 -m3 'error' "$OUT/build.log" | head -60; exit 1; }
t0=$(date +%s)
(cd "$BUILD" && timeout "$(left)" ctest -L cuda --output-on-failure) > "$OUT/cuda-tests.log" 2>&1
rc=$?
log "- cuda tests: exit $rc in $(( $(date +%s) - t0 )) s: $(grep -E 'tests passed|tests failed' "$OUT/cuda-tests.log" | tail -1)"
grep -E '^ *[0-9]+/[0-9]+ Test' "$OUT/cuda-tests.log" | sed 's/^/    /' | tee -a "$REPORT"
"$BUILD/bin/test_init" --gtest_filter='Device*:Backends*' > "$OUT/device-tests.log" 2>&1
log "- test_init Device*/Backends*: exit $? ($(grep -E 'PASSED|FAILED' "$OUT/device-tests.log" | head -2 | xargs))"
# ddp-train's MLP on the GPU and on the CPU, then through ddprun (backend auto: nccl for the GPU).
for run in "cuda" "cpu" "ddprun cuda"; do
  dev=${run##* }
  cmd=("$BUILD/bin/ddp-train" mlp --device "$dev" --epochs 2 --no-progress --out-dir "$BUILD/runs/mlp-$dev")
  [ "${run%% *}" = ddprun ] && cmd=("$BUILD/bin/ddprun" --nproc-per-node 1 --standalone "${cmd[@]}")
  t0=$(date +%s%3N)
  timeout "$(left)" "${cmd[@]}" > "$OUT/mlp-${run// /-}.log" 2>&1
  r=$?
  f="$OUT/mlp-${run// /-}.log"
  log "- ddp-train mlp ($run): exit $r in $(( $(date +%s%3N) - t0 )) ms: $( (grep -m1 'rank(s) on' "$f" || head -2 "$f") | cut -c1-200)"
  log "    $( (grep -E '^done' "$f" || tail -1 "$f") | tail -1 | cut -c1-200)"
done
set -e
[ $rc = 0 ] || { grep -E -B3 -A20 'Failure|FAILED' "$OUT/cuda-tests.log" | head -80; exit 1; }
log "- total: $(( $(date +%s) - START )) s"
