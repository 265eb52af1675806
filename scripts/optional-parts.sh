#!/usr/bin/env bash
# The optional parts are optional: ddp's libraries and tools build with DDP_WITH_IMAGE_FOLDER,
# DDP_WITH_REPORT and DDP_WITH_CHECKPOINT_VERIFY all OFF, linking no libjpeg-turbo, libspng, libzip
# or Chart.js; ddp-train then trains and says what it lacks. Run by .ci/run.
# usage: scripts/optional-parts.sh [BUILD_DIR]   (default build-minimal)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-minimal}
work=$(mktemp -d) work_log=$(mktemp -d)
trap 'rm -rf "$work" "$work_log"' EXIT
cmake -S . -B "$dir" -G Ninja -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_EXAMPLES=OFF \
  -DDDP_WITH_IMAGE_FOLDER=OFF -DDDP_WITH_REPORT=OFF -DDDP_WITH_CHECKPOINT_VERIFY=OFF > "$work_log/configure.log" 2>&1 ||
  { cat "$work_log/configure.log"; exit 1; }
ninja -C "$dir" ddp_dist ddp_parallel ddp_train ddprun ddp-train ddp-bench > "$work_log/build.log" 2>&1 ||
  { tail -50 "$work_log/build.log"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
# What was left out is not linked.
for lib in "$dir"/lib/libddp_*.so; do
  if ldd "$lib" | grep -E 'turbojpeg|spng|libzip'; then fail "$lib links an optional part's library"; fi
done
# ddp-train has no imagefolder recipe, trains mlp, writes no report and says so; `report` explains.
"$dir/bin/ddp-train" --help | grep -q imagefolder && fail "the imagefolder recipes are still registered"
out=$("$dir/bin/ddp-train" mlp --epochs 1 --limit-train 256 --limit-test 64 --no-progress --out-dir "$work/run" 2>&1) ||
  { echo "$out"; fail "mlp did not train"; }
grep -q "report: none (ddp was built with -DDDP_WITH_REPORT=OFF)" <<<"$out" || { echo "$out"; fail "no report line"; }
[ ! -e "$work/run/report.html" ] || fail "a report was written"
if out=$("$dir/bin/ddp-train" report "$work/run" 2>&1); then fail "ddp-train report succeeded"; fi
grep -q "built without the run report (-DDDP_WITH_REPORT=OFF)" <<<"$out" || { echo "$out"; fail "report's error"; }
# The checkpoint it wrote loads (resume), without the CRC check.
"$dir/bin/ddp-train" mlp --epochs 2 --limit-train 256 --limit-test 64 --no-progress --out-dir "$work/run" --resume \
  > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "resume"; }
grep -q "resumed from" "$work/resume.log" || fail "did not resume"
"$dir/bin/ddp-bench" --help | grep -q "^  decode " && fail "ddp-bench decode exists without ImageFolder"
echo "optional parts: libraries and tools build and run without ImageFolder, the report and checkpoint verification"
