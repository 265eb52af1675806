#!/usr/bin/env bash
# canary_test.sh DDPRUN CANARY KIND PATTERN: runs the canary (a deliberate fault) on 2 ranks through
# ddprun; passes when ddprun exits 86 (the exitcode scripts/sanitize.sh sets) and the report,
# matching PATTERN, is in a report file (log_path) or, for UBSan inside the ASan runtime (which
# writes to stderr whatever log_path says), in ddprun's output, which ctest's log keeps and
# sanitize.sh scans. Its own log_path keeps these expected reports out of sanitize.sh's folder.
set -uo pipefail
ddprun=$1 canary=$2 kind=$3 pattern=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
  export $v="${!v:-}:halt_on_error=1:exitcode=86:log_path=$dir/report"
done
"$ddprun" --nproc-per-node 2 --standalone "$canary" "$kind" >"$dir/out" 2>&1
rc=$?
sed -e 's/runtime error:/runtime error (expected):/' -e 's/Sanitizer:/Sanitizer (expected):/' "$dir/out"  # not matched by sanitize.sh's scan
echo "canary_test: ddprun exited $rc; report files: $(cd "$dir" && ls report.* 2>/dev/null)"
[ "$rc" = 86 ] || { echo "canary_test: expected exit 86"; exit 1; }
grep -qs -- "$pattern" "$dir"/report.* "$dir/out" || { echo "canary_test: no report matching '$pattern'"; exit 1; }
exit 0
