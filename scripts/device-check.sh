#!/usr/bin/env bash
# The GPU check (issue "GPUs"), for a machine with a GPU that installs nothing (the device tool's):
#   here:  ./scripts/device-check.sh --pack      # into .device/ (git-ignored): the binaries the check runs, built
#                                                # here against the GPU machines' LibTorch (torch 2.11.0, CUDA
#                                                # 13.0), stripped, found there under /opt/torch/.venv; the
#                                                # headers a build there would lack; Fashion-MNIST (the demo's).
#                                                # On a fresh 2-core machine 15 min (2 of them the 5 GB venv;
#                                                # AMD EPYC, 2026-12-07), after a change about 2 min
#          DEVICE_PACK_BINARIES=0 ./scripts/device-check.sh --pack    # the headers and data alone (a minute):
#                                                # the check then builds there (16 cores: minutes of the budget)
#   there: ./scripts/device-check.sh             # with .device carried along
# There it runs the packed binaries if they were built from these sources and start; else it builds them against
# the machine's LibTorch (DEVICE_PYTHON's torch, default /opt/torch/.venv). Then each check with a timeout of its
# own: the cuda tests, the Trainer's step-path reads over nccl (StepSyncs at world 1), the shared suites over nccl at world 1 and at world 2 on one GPU (on CUDA tensors: the
# suites run on ProcessGroup::device()), nccl's fault tests, ddp-train on the GPU (worlds 1 and 2, bf16, a resume,
# compute-sanitizer), and the benchmarks beside PyTorch's (the DDP step, the airbench-shaped step, the demo's job to
# 91%). It writes a short report, OUT/device-report.md (default OUT: device-out/), and the checks' logs as one
# archive, OUT/device-logs.tar.gz (the device tool brings back at most 8 files). Everything inside
# DEVICE_CHECK_BUDGET seconds (default 480: the issue's 8 minutes); out of budget fails.
# DEVICE_IGNORE_SYSTEM=1 hides /usr from CMake's searches, so that a rehearsal on a machine that has the
# packages proves .device/ holds all that the build finds.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=$PWD/.device
ARCH_LIB=/usr/lib/x86_64-linux-gnu
TARGETS=(test_cuda test_init step_syncs_gpu suite_mp dist_probe ddprun ddp-train ddp-bench)
THERE_SITE=/opt/torch/.venv/lib/python3.12/site-packages  # the GPU machines' (device/KINDS.md: Python 3.12.3)
THERE_TORCH=2.11.0

# What the binaries are built from: every file under the folders the build reads, tracked or not.
source_hash() {
  find CMakeLists.txt cmake src include tests tools resources -type f -print0 | sort -z | xargs -0 sha1sum |
    sha1sum | cut -c1-16
}
# device_cmake BUILD PREFIX_PATH PYTHON: CMAKE_ARGS = the one configuration of the device build, here and there.
device_cmake() {
  CMAKE_ARGS=(-S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$2" -DDDP_PYTHON="$3"
              -DDDP_CUDA_TESTS_ONLY=ON -DDDP_BUILD_EXAMPLES=OFF -DDDP_WITH_MPI=OFF
              -DDDP_WITH_IMAGE_FOLDER=OFF -DDDP_WITH_REPORT=OFF -DDDP_WITH_CHECKPOINT_VERIFY=OFF)
}

if [ "${1:-}" = --pack ]; then
  rm -rf "$DEV"
  mkdir -p "$DEV/usr/include" "$DEV/usr/share/cmake" "$DEV/usr/lib/x86_64-linux-gnu/cmake" "$DEV/bin" "$DEV/lib"
  # For a build there, should the binaries not start: Debian's gloo headers (c10d's ProcessGroupGloo.hpp;
  # LibTorch carries gloo itself), CLI11, nlohmann-json, toml++, GoogleTest, zlib's headers.
  cp -r /usr/include/{gloo,CLI,nlohmann,toml++,gtest,gmock} /usr/include/{zlib.h,zconf.h} "$DEV/usr/include/"
  cp -r /usr/share/cmake/{CLI11,nlohmann_json} "$DEV/usr/share/cmake/"
  cp -r $ARCH_LIB/cmake/{GTest,tomlplusplus} "$DEV/usr/lib/x86_64-linux-gnu/cmake/"
  cp $ARCH_LIB/lib{gtest,gtest_main,gmock,gmock_main}.a "$DEV/usr/lib/x86_64-linux-gnu/"
  # The demo's data (Debian's dataset-fashion-mnist, 30 MB of gzip): the GPU machines have none.
  mkdir -p "$DEV/data" && cp -r /usr/share/datasets/fashion-mnist "$DEV/data/"
  if [ "${DEVICE_PACK_BINARIES:-1}" = 0 ]; then du -sh "$DEV"; exit 0; fi
  # The binaries, against the same LibTorch as there (PyPI's torch==2.11.0 in a venv here).
  venv=${DEVICE_PACK_VENV:-build-device-pack/venv}
  DDP_TORCH2_VERSION=$THERE_TORCH DDP_TORCHVISION_VERSION=0.26.0 ./scripts/install-deps.sh --torch 2 --venv "$venv"
  build=${DEVICE_PACK_BUILD:-build-device-pack}
  # RUNPATH: ddp's libraries beside the binaries, then torch's there (the build's own entries, for here, come
  # first and do not exist there).
  device_cmake "$build" "$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')" "$venv/bin/python"
  cmake "${CMAKE_ARGS[@]}" -DCMAKE_BUILD_RPATH="\$ORIGIN/../lib;$THERE_SITE/torch/lib"
  cmake --build "$build" -j "$(nproc)" --target "${TARGETS[@]}"
  for t in "${TARGETS[@]}"; do strip --strip-unneeded -o "$DEV/bin/$t" "$build/bin/$t"; done
  # Under the names the binaries ask for (libddp_dist.so.0, ...), as files: a carried tree may drop symlinks.
  for l in "$build"/lib/libddp_*.so.0; do strip --strip-unneeded -o "$DEV/lib/$(basename "$l")" "$(readlink -f "$l")"; done
  source_hash > "$DEV/source-hash"
  echo "built $(date -u +%FT%TZ) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) against torch" \
    "$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" > "$DEV/built"
  du -sh "$DEV" "$DEV/bin" "$DEV/lib"
  exit 0
fi

[ -d "$DEV/usr/include/gloo" ] || { echo "device-check: no .device/ here: run ./scripts/device-check.sh --pack on the build machine and carry .device" >&2; exit 2; }
START=$(date +%s)
# The scripts the checks run directly (a carried tree may drop their exec bits).
chmod u+x tests/dist/own_host.sh tests/dist/nccl_one_gpu_test.sh tests/train/resume_test.sh || true
BUDGET=${DEVICE_CHECK_BUDGET:-480}
PY=${DEVICE_PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-$PWD/device-out}
LOGS=${DEVICE_LOGS:-$(mktemp -d /tmp/device-logs.XXXXXX)}  # each check's log, and runs/: archived on exit
BUILD=${DEVICE_BUILD:-build-device}
mkdir -p "$OUT" "$LOGS"
REPORT=$OUT/device-report.md
log() { echo "$*" | tee -a "$REPORT"; }
: > "$REPORT"
# On every exit: the logs, results and metrics (not checkpoints) in one archive beside the report.
archive_logs() {
  (cd "$LOGS" && find . -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.tsv' \) -size -4M |
    tar czf "$OUT/device-logs.tar.gz" -T -) || echo "device-check: could not archive $LOGS" >&2
}
trap 'rc=$?; archive_logs; [ $rc = 0 ] || echo "device-check: stopped with exit $rc (see $OUT)" >&2' EXIT
# budget STEP [LIMIT]: T = the seconds STEP may take (LIMIT, or what is left if less); once the budget is
# spent, the check stops, saying before which step (and T never reaches 0, which `timeout` takes as no limit).
# Out of budget among the checks, it names where a second run starts: the check the budget cut short, if one was,
# else this one; the first of a pair compared in the report (X before X-pytorch); with DEVICE_CHECK_ONLY kept.
budget() {
  T=$((BUDGET - ($(date +%s) - START)))
  if [ "$T" -le 0 ]; then
    local from=${CUT:-$1}
    from=${from%-pytorch}
    log "- out of budget (DEVICE_CHECK_BUDGET=$BUDGET s) before: $1${IN_CHECKS:+ (the rest: ${ONLY:+DEVICE_CHECK_ONLY='$ONLY' }DEVICE_CHECK_FROM=$from)}"
    exit 1
  fi
  if [ -n "${2:-}" ] && [ "$2" -lt "$T" ]; then T=$2; fi
}

log "# ddp device check, $(date -u +%FT%TZ), sources $(source_hash)"
log ""
log "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: none')"
log "- torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"
log "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

# The binaries: the packed ones if built from these sources and they start here, else a build (DEVICE_BIN: these,
# for a rehearsal with a build of this machine).
BIN=${DEVICE_BIN:-}
if [ -n "$BIN" ]; then
  log "- binaries: $BIN (DEVICE_BIN)"
elif [ -e "$DEV/bin/test_init" ] && [ "$(cat "$DEV/source-hash" 2>/dev/null)" = "$(source_hash)" ]; then
  chmod u+x "$DEV"/bin/* || true  # a carried tree may drop the exec bits
  # Each library the binaries load (test_init: ddp_dist's; ddp-train: data's and train's too).
  if "$DEV/bin/test_init" --gtest_list_tests > "$LOGS/packed-start.log" 2>&1 &&
     "$DEV/bin/ddp-train" --help >> "$LOGS/packed-start.log" 2>&1; then
    BIN=$DEV/bin
    log "- binaries: packed ($(cat "$DEV/built"))"
  else
    log "- binaries: packed ones do not start here ($(tail -1 "$LOGS/packed-start.log" | cut -c1-160)): building"
  fi
elif [ -e "$DEV/bin/test_init" ]; then
  log "- binaries: packed from other sources ($(cat "$DEV/source-hash")): building"
fi
if [ -z "$BIN" ]; then
  # zlib's library: the dev symlink where there is one, else the runtime's (GPU images lack the dev package).
  ZLIB_SO=
  for z in $ARCH_LIB/libz.so $ARCH_LIB/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1; do
    [ -e "$z" ] && { ZLIB_SO=$z; break; }
  done
  [ -n "$ZLIB_SO" ] || { log "- no libz.so or libz.so.1 under $ARCH_LIB: zlib is needed to build"; exit 1; }
  ignore=()
  [ "${DEVICE_IGNORE_SYSTEM:-0}" = 1 ] && ignore=(-DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local")
  TORCH_CMAKE=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  set +e
  budget configure
  device_cmake "$BUILD" "$TORCH_CMAKE;$DEV/usr" "$PY"
  timeout "$T" cmake "${CMAKE_ARGS[@]}" "${ignore[@]}" -DZLIB_INCLUDE_DIR="$DEV/usr/include" -DZLIB_LIBRARY="$ZLIB_SO" > "$LOGS/configure.log" 2>&1
  rc=$?
  set -e
  { grep -E 'ddp:|ddp backends' "$LOGS/configure.log" || true; } | sed 's/^-- /- /' | tee -a "$REPORT"
  [ $rc = 0 ] || { log "- configure FAILED ($rc): see configure.log"; tail -30 "$LOGS/configure.log"; exit 1; }
  t0=$(date +%s)
  budget build
  set +e
  timeout "$T" cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" > "$LOGS/build.log" 2>&1
  rc=$?
  set -e
  log "- build: exit $rc in $(( $(date +%s) - t0 )) s"
  [ $rc = 0 ] || { log "- build FAILED: see build.log"; grep -B2 -A12 -m3 'error' "$LOGS/build.log" | head -60; exit 1; }
  BIN=$BUILD/bin
fi

# check NAME LIMIT_S COMMAND...: one check, its log LOGS/NAME.log, one line in the report (its last summary
# line: gtest's, ctest's, a script's). A check that fails is counted; the next one still runs. Its output is
# line-buffered (a check killed at its limit keeps what it printed), and what it left running is ended after it.
# DEVICE_CHECK_ONLY (an extended regex of check names) runs those alone, DEVICE_CHECK_FROM=NAME the checks from NAME
# on, in order (what a run out of budget names): a second run, for what the first missed.
failed=() ran=0 skipped=()
BIN=$(cd "$BIN" && pwd)
ONLY=${DEVICE_CHECK_ONLY:-}
FROM=${DEVICE_CHECK_FROM:-}
reached=1 IN_CHECKS=1 CUT= RAN_LAST=0
if [ -n "$ONLY" ]; then
  re_rc=0
  [[ x =~ $ONLY ]] || re_rc=$?
  [ $re_rc != 2 ] || { log "- DEVICE_CHECK_ONLY='$ONLY' is not an extended regex"; exit 2; }
  log "- DEVICE_CHECK_ONLY='$ONLY': the checks it names, alone"
fi
if [ -n "$FROM" ]; then
  reached=0
  log "- DEVICE_CHECK_FROM=$FROM: the checks from $FROM on"
fi
LINEBUF=()
command -v stdbuf > /dev/null && LINEBUF=(stdbuf -oL)
BIN_RE=$(printf '%s/' "$BIN" | sed 's/[][\.*^$+?(){}|]/\\&/g')
sweep() {  # the check's processes that outlived it (ranks of a timed-out launch, in a process group of their own)
  pkill -KILL -f -- "$BIN_RE|bench/(ddp|fashion|compute)_peer[.]py" 2> /dev/null || true
}
# uncount NAME WHY: a failed check NAME is said, with WHY, and not counted.
uncount() {
  local kept=() n
  for n in "${failed[@]}"; do
    if [ "$n" = "$1" ]; then log "    $1: $2"; else kept+=("$n"); fi
  done
  failed=("${kept[@]}")
}
check() {
  local name=$1 limit=$2 t0 rc f
  shift 2
  f=$LOGS/$name.log
  [ "$name" != "$FROM" ] || reached=1
  if [ $reached = 0 ] || { [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; }; then
    echo "(not run: DEVICE_CHECK_ONLY='$ONLY', DEVICE_CHECK_FROM='$FROM')" > "$f"
    skipped+=("$name")
    RAN_LAST=0
    return 0
  fi
  ran=$((ran + 1)) RAN_LAST=1
  budget "$name" "$limit"
  t0=$(date +%s)
  set +e
  timeout -k 10 "$T" "${LINEBUF[@]}" "$@" > "$f" 2>&1
  rc=$?
  set -e
  sweep
  if [ "$T" -lt "$limit" ] && { [ $rc = 124 ] || [ $rc = 137 ]; }; then CUT=${CUT:-$name}; fi  # the budget's end
  [ $rc = 124 ] && echo "(timed out: the check's limit of $T s, or a test case's DDP_TEST_CASE_TIMEOUT, said above)" >> "$f"
  [ $rc = 137 ] && echo "(killed 10 s after its limit of $T s)" >> "$f"
  [ $rc = 77 ] && echo "(exit 77: a case skipped, said above; on the GPU machine every case must run)" >> "$f"
  [ $rc = 0 ] || failed+=("$name")
  log "- $name: exit $rc in $(( $(date +%s) - t0 )) s: $( (grep -E 'PASSED|FAILED|passed|failed|timed out|skipped' "$f" || tail -1 "$f") | tail -1 | cut -c1-200)"
}
# A hang ends within DDP_TIMEOUT (a collective) or DDP_TEST_CASE_TIMEOUT (a test case, named): each 10x or more
# what it takes on a GPU. NCCL says why it fails.
export OMP_NUM_THREADS=1 DDP_TIMEOUT=45 DDP_TEST_CASE_TIMEOUT=60 DDP_CHECK_HOOK_WAITS=1 PYTHONUNBUFFERED=1 NCCL_DEBUG=WARN
check cuda-tests 240 "$BIN/test_cuda" --gtest_brief=1 --gtest_filter='-*ThreadRanksOnOneGpu*'
# The Trainer's step path on the GPU reads nothing on the host (issue 45): fits of 2 and 6 steps count the same
# reads, over nccl at world 1 (--device auto takes the GPU), --nan-check-at next-step (the GPU's default) included.
check step-syncs-nccl-w1 120 env DDP_STEP_SYNCS_BACKEND=nccl "$BIN/step_syncs_gpu" --gtest_brief=1 \
  --gtest_filter='Trainer/StepSyncs*/*_w1*'
# (Not the case for machines where nccl cannot run: it skips where a GPU is visible, and a skip exits 77.)
check devices 60 "$BIN/test_init" --gtest_filter='Device*:Backends*:-Backends.NcclWithoutAGpuSaysWhy' --gtest_brief=1
check suite-nccl-w1 200 "$BIN/ddprun" --nproc-per-node 1 --standalone --backend nccl "$BIN/suite_mp" --gtest_brief=1
# World 2 on one GPU: each rank its own NCCL host (tests/dist/own_host.sh), joined over NCCL's sockets.
check suite-nccl-w2-one-gpu 200 "$BIN/ddprun" --nproc-per-node 2 --standalone --backend nccl \
  tests/dist/own_host.sh "$BIN/suite_mp" --gtest_brief=1
check nccl-faults-one-gpu 200 tests/dist/nccl_one_gpu_test.sh "$BIN"
# ddp-train's MLP on the GPU and on the CPU, then through ddprun (backend auto: nccl for the GPU).
for run in cuda cpu ddprun-cuda; do
  dev=${run##*-}
  cmd=("$BIN/ddp-train" mlp --device "$dev" --epochs 2 --no-progress --out-dir "$LOGS/runs/mlp-$run")
  [ "$run" = ddprun-cuda ] && cmd=("$BIN/ddprun" --nproc-per-node 1 --standalone "${cmd[@]}")
  check "mlp-$run" 90 "${cmd[@]}"
  log "    $( (grep -m1 'rank(s) on' "$LOGS/mlp-$run.log"; grep -E -m1 '^(\[rank 0\] )?done' "$LOGS/mlp-$run.log") | tr '\n' ' ' | cut -c1-200)"
done
# World 2 on the one GPU over nccl (each rank its own NCCL host) and over gloo (processes: CUDA tensors through
# gloo), beside world 2 on the CPU over gloo.
for run in nccl-cuda-w2 gloo-cuda-w2 gloo-cpu-w2; do
  IFS=- read -r be dev _ <<< "$run"
  host=()
  [ "$be" = nccl ] && host=(tests/dist/own_host.sh)
  check "mlp-$run" 120 "$BIN/ddprun" --nproc-per-node 2 --standalone --backend "$be" "${host[@]}" "$BIN/ddp-train" mlp \
    --device "$dev" --epochs 2 --no-progress --out-dir "$LOGS/runs/mlp-$run"
  log "    $(grep -E '^(\[rank 0\] )?done' "$LOGS/mlp-$run.log" | head -1 | cut -c1-200)"
done
# bf16 autocast on the GPU; checkpoints written on the GPU, resumed to the uninterrupted run's weights bit for bit.
check mlp-bf16-cuda 90 "$BIN/ddp-train" mlp --device cuda --precision bf16 --epochs 1 --no-progress --out-dir "$LOGS/runs/bf16"
log "    $(grep -m1 'rank(s) on' "$LOGS/mlp-bf16-cuda.log" | cut -c1-200)"
# The timeline of a GPU run: forward, backward and the optimizer step on the device's own track (CUDA events).
check timeline-cuda 90 bash -c "mkdir -p \"$LOGS/runs/timeline\" && \"$BIN/ddp-train\" mlp --device cuda --epochs 1 --limit-train 2048 --no-progress \
  --out-dir \"$LOGS/runs/timeline\" --timeline \"$LOGS/runs/timeline/t.json\" &&
  \"$PY\" tests/train/timeline_device_check.py \"$LOGS/runs/timeline/t.json\" cuda:0"
check resume-cuda 120 env DDP_PYTHON="$PY" tests/train/resume_test.sh "$BIN/ddprun" "$BIN/ddp-train" mlp 1 --device cuda
# FashionCNN (convolutions, dropout) on the GPU under --deterministic: the resumed run draws the dropout masks the
# uninterrupted one drew (the GPU's generator, "device_rng") and its convolutions repeat.
check resume-cuda-dropout 120 env DDP_PYTHON="$PY" tests/train/resume_test.sh "$BIN/ddprun" "$BIN/ddp-train" \
  fashion-mnist 1 --device cuda --batch-size 16 --deterministic
# World 2 over gloo with CUDA gradients and PowerSGD: its per-rank state comes back from the checkpoint on the CPU
# and must move onto the GPU (found by reading: it did not), and the GPUs' generators are kept ("device_rng").
check resume-cuda-powersgd-w2 150 env DDP_PYTHON="$PY" DDP_BACKEND=gloo tests/train/resume_test.sh "$BIN/ddprun" \
  "$BIN/ddp-train" mlp 2 --device cuda --limit-train 576 --limit-test 96 --comm-hook powersgd:rank=2,start=2
# Side by side on this GPU: DDP's step against the plain loop (world 1), and against PyTorch's Python DDP (world 1,
# and world 2 on one GPU), the course MLP and FashionCNN. Figures in the report; the goals are docs/benchmarks.md's.
BENCH=(--steps 200 --warmup 20)
check bench-mlp-pair-w1 60 "$BIN/ddprun" --nproc-per-node 1 --standalone "$BIN/ddp-bench" ddp --model mlp --device cuda --pair "${BENCH[@]}"
check bench-cnn-pair-w1 60 "$BIN/ddprun" --nproc-per-node 1 --standalone "$BIN/ddp-bench" ddp --model cnn --device cuda --pair "${BENCH[@]}"
# What ddp-train's per-step guards cost on the GPU: the stop check reads its flags after the step they overlap, on
# spaced check steps; --nan-check reads its gradient sums a step later (next-step, the GPU's default), or before the
# update (step: one sync per step, as GradScaler's found_inf).
check bench-mlp-guards-w1 60 "$BIN/ddprun" --nproc-per-node 1 --standalone "$BIN/ddp-bench" ddp --model mlp --device cuda \
  --pair --guards both "${BENCH[@]}"
check bench-mlp-guards-step-w1 60 "$BIN/ddprun" --nproc-per-node 1 --standalone "$BIN/ddp-bench" ddp --model mlp \
  --device cuda --pair --guards both --nan-check-at step "${BENCH[@]}"
for w in 1 2; do
  host=()
  [ $w = 2 ] && host=(tests/dist/own_host.sh)
  for m in mlp cnn; do
    check "bench-$m-w$w" 60 "$BIN/ddprun" --nproc-per-node $w --standalone --backend nccl "${host[@]}" \
      "$BIN/ddp-bench" ddp --model $m --device cuda "${BENCH[@]}"
    check "bench-$m-w$w-pytorch" 90 "$BIN/ddprun" --nproc-per-node $w --standalone "${host[@]}" "$PY" bench/ddp_peer.py \
      --model $m --device cuda "${BENCH[@]}"
    log "    ddp $(grep -o 'step [0-9.]* ms' "$LOGS/bench-$m-w$w.log" | head -1) | pytorch $(grep -o 'step [0-9.]* ms' "$LOGS/bench-$m-w$w-pytorch.log" | head -1) (each DDP's defaults: gradients as bucket views in ours, not in PyTorch's)"
  done
done
# nccl's all_reduce on GPU buffers at world 2 on the one GPU (what a bucket's reduction costs per size).
check bench-collectives-nccl-w2 45 "$BIN/ddprun" --nproc-per-node 2 --standalone --backend nccl tests/dist/own_host.sh \
  "$BIN/ddp-bench" collectives --device cuda --ops all_reduce --min-bytes 4K --max-bytes 64M --rounds 2
# The airbench-shaped step on synthetic CIFAR-sized data (batch 1024, channels-last, as airbench94 runs it): ours
# beside PyTorch eager's, and PyTorch's captured whole in a CUDA graph (what graphs give).
AIR=(--models airbench --batch 1024 --steps 10 --layouts nhwc --precisions fp32,bf16)
check bench-airbench 90 "$BIN/ddp-bench" compute --device cuda --gemm-n 4096 "${AIR[@]}" --json "$LOGS/air-ours.json"
check bench-airbench-pytorch 120 "$PY" bench/compute_peer.py --device cuda --cuda-graph "${AIR[@]}" \
  --json "$LOGS/air-pytorch.json"
log "    $("$PY" bench/compare_compute.py "$LOGS/air-ours.json" "$LOGS/air-pytorch.json" 2>&1 | tr '\n' ' ' | cut -c1-300)"
# The demo's job to 91% on the GPU (fashion-mnist-fast, world 1) beside PyTorch's DDP on the same data and GPU
# (FashionCNN at its best CPU settings, 4 epochs, evaluating every 58 steps as the demo does): wall time from the
# launch to the first evaluation at >= 91%.
DATA=$DEV/data/fashion-mnist
: > "$LOGS/demo-runs.tsv"
mkdir -p "$LOGS/runs"
for run in demo demo-pytorch; do
  if [ $run = demo ]; then
    cmd=("$BIN/ddp-train" fashion-mnist-fast --device cuda --data-dir "$DATA" --no-progress --out-dir "$LOGS/runs/demo")
  else
    cmd=("$PY" bench/fashion_peer.py --device cuda --epochs 4 --batch-size 128 --eval-every 58 --data-dir "$DATA"
         --json "$LOGS/runs/demo-pytorch.json")
  fi
  t0=$(date +%s.%N)
  check "$run" 120 "$BIN/ddprun" --nproc-per-node 1 --standalone "${cmd[@]}"
  if [ $RAN_LAST = 1 ]; then printf '%s\t%s\t%s\t%s\n' "$run" "$LOGS/runs/$run" "$t0" "$(date +%s.%N)" >> "$LOGS/demo-runs.tsv"; fi
done
{ "$PY" bench/time_to_accuracy.py "$LOGS/demo-runs.tsv" --target 0.91 2>&1 || true; } | sed 's/^/    /' | tee -a "$REPORT"
# A short compute-sanitizer (memcheck) pass over DDP steps on the GPU: late, as it runs the GPU many times slower.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$SANITIZER" ]; then
  # Memory errors in the step's kernels, not failed API calls libraries make on purpose (NCCL's start-up probes
  # cuGetProcAddress: NVIDIA/nccl#727); over gloo, as at world 1 nothing leaves the process and NCCL needs no start.
  API=()
  "$SANITIZER" --help 2>&1 | grep -q -- --report-api-errors && API=(--report-api-errors no)
  check sanitizer-ddp-step 150 env DDP_BACKEND=gloo "$SANITIZER" --tool memcheck "${API[@]}" --error-exitcode 9 \
    "$BIN/ddp-train" mlp --device cuda --epochs 1 --limit-train 1024 --no-progress --out-dir "$LOGS/runs/sanitizer"
  # gVisor's runtime refuses it (device/KINDS.md): said so, not counted as ddp's failure.
  grep -q 'Device not supported' "$LOGS/sanitizer-ddp-step.log" &&
    uncount sanitizer-ddp-step "'Device not supported' on this machine's runtime: no memory check here"
else
  log "- sanitizer-ddp-step: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
fi
# Last: rank threads sharing one GPU (and so autograd's one thread for it) over gloo, predicted to fail by the
# timeout (test_cuda_trainer.cpp); a short DDP_TIMEOUT, so that a hang is an error within the limit. What it
# shows is reported, not counted: one process per GPU, as a real job runs, has no such sharing.
check cuda-thread-ranks 90 env DDP_TIMEOUT=15 "$BIN/test_cuda" --gtest_brief=1 --gtest_filter='*ThreadRanksOnOneGpu*'
uncount cuda-thread-ranks "did not pass, as predicted (reported, not counted)"
[ -z "$ONLY$FROM" ] || log "- not run (DEVICE_CHECK_ONLY, DEVICE_CHECK_FROM): ${skipped[*]:-none}"
[ $reached = 1 ] || { log "- DEVICE_CHECK_FROM=$FROM names no check"; exit 1; }
[ "$ran" -gt 0 ] || { log "- no check ran: DEVICE_CHECK_ONLY='$ONLY' names none"; exit 1; }
log "- total: $(( $(date +%s) - START )) s; $ran check(s); failed: ${failed[*]:-none}"
[ ${#failed[@]} = 0 ] || { for n in "${failed[@]}"; do echo "== $n"; { grep -E -B3 -A20 'Failure|FAILED|FAIL|timed out|still running' "$LOGS/$n.log" || tail -20 "$LOGS/$n.log"; } | head -40 || true; done; exit 1; }
