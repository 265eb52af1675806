#!/usr/bin/env bash
# Builds with sanitizers and runs the dist/, parallel/ and launcher suites under them.
#   scripts/sanitize.sh asan|tsan [ctest regex]
# asan: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer, in build-asan/.
# tsan: ThreadSanitizer, in build-tsan/.
# -O1 -g (CMake option DDP_SANITIZE). Every program the tests start (ddprun, its ranks, mpirun's
# ranks, the probes) is built in the same folder and inherits the options below. Reports go to
# files (log_path), one per process: any file there fails the run, whatever the tests' exit codes
# (a test that expects a rank to fail would otherwise hide the sanitizer's exit code); so does a
# report in ctest's log (UBSan inside the ASan runtime ignores log_path and writes to stderr).
# Suppressions: scripts/sanitizers/*.supp, each entry with its proof.
# Exit: 0 every test passed and no report; 1 a test failed or a sanitizer reported; 2 usage.
# Label sanitize: the canaries, a deliberate fault in a rank ddprun launches, which must be reported.
# JOBS (build, default nproc), CTEST_JOBS (default 2); for a partial run, TARGETS (what to build,
# default: all the suites need) and LABELS (ctest -L, default '^(dist|parallel|launcher|sanitize)$').
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kind=${1:-}
regex=${2:-}
case $kind in
  asan) sanitize=address,undefined ;;
  tsan) sanitize=thread ;;
  *) echo "usage: $0 asan|tsan [ctest regex]" >&2; exit 2 ;;
esac
dir=$root/build-$kind
supp=$root/scripts/sanitizers
reports=$dir/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"

# What the dist/, parallel/ and launcher suites run, and the programs they start.
targets=(sanitize_canary ddprun ddprun_probe ddprun_error_probe dist_probe suite_mp
         test_collectives_threads test_work test_init test_fault_detection test_failures
         test_ddp_threads test_bucketing test_sync_batch_norm
         ddprun_unit_test ddprun_launch_test ddp_error_file_test ddprun_fault_test ddprun_elastic_test)
if command -v mpirun >/dev/null; then
  targets+=(test_mpi_backend ddprun_mpi_launch_test)
fi
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"

# The options are set before the build: tests/discover_suites.cmake runs each test binary there.
common="print_stacktrace=1:exitcode=86"
if [ "$kind" = asan ]; then
  # fast_unwind_on_malloc=0: OpenMPI has no frame pointers, so the fast unwinder cuts its allocation stacks
  # after one frame and scripts/sanitizers/lsan.supp's entries (MPI_Init_thread, ...) could not match.
  export ASAN_OPTIONS="$common:halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:log_path=$reports/asan"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="$common:halt_on_error=1:log_path=$reports/ubsan:suppressions=$supp/ubsan.supp"
else
  # LibTorch, Gloo, OpenMPI and libstdc++ are not instrumented: their memory accesses are
  # invisible to TSan, and reports from interceptors they call (memcpy, free) would be about
  # their internals (ignore_noninstrumented_modules=1).
  export TSAN_OPTIONS="$common:halt_on_error=0:second_deadlock_stack=1:log_path=$reports/tsan:suppressions=$supp/tsan.supp:ignore_noninstrumented_modules=1"
fi
# Before OMP_NUM_THREADS=1: GNU nproc honours it (it would build with -j1).
jobs=${JOBS:-$(nproc)}
# ATen's OpenMP threads (libgomp, not instrumented) sync through spinning TSan cannot see; one
# thread also keeps the 2-core machine responsive. The suites set it for their ranks too.
export OMP_NUM_THREADS=1

start=$(date +%s)
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_SANITIZE=$sanitize
fi
nice -n 10 cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
built=$(date +%s)

status=0
args=(-L "${LABELS:-^(dist|parallel|launcher|sanitize)\$}" -j "${CTEST_JOBS:-2}" --output-on-failure)
[ -n "$regex" ] && args+=(-R "$regex")
(cd "$dir" && ctest "${args[@]}") || status=1
end=$(date +%s)

shopt -s nullglob
files=("$reports"/*)
# UBSan inside the ASan runtime writes to stderr whatever log_path says: scan ctest's log too.
log=$dir/Testing/Temporary/LastTest.log
scan='runtime error: |ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer'
if [ -f "$log" ] && grep -Eq "$scan" "$log"; then
  echo "sanitize.sh: sanitizer reports in the tests' output ($log):" >&2
  grep -En -A12 "$scan" "$log" | head -n 120 >&2
  status=1
fi
if [ ${#files[@]} -gt 0 ]; then
  echo "sanitize.sh: ${#files[@]} sanitizer report(s) in $reports:" >&2
  for f in "${files[@]}"; do
    echo "==== $f" >&2
    head -n 60 "$f" >&2
  done
  status=1
fi
echo "sanitize.sh $kind: build $((built - start)) s, tests $((end - built)) s," \
     "${#files[@]} report(s), exit $status"
exit $status
