#!/usr/bin/env bash
# canary_test.sh DDPRUN CANARY KIND PATTERN: runs the canary (a deliberate fault) on 2 ranks through
# ddprun with the sanitizer's reports sent to a temporary folder; passes when ddprun exits 86 (the
# exitcode scripts/sanitize.sh sets) and a report there matches PATTERN. Its own folder keeps
# these expected reports out of sanitize.sh's.
set -uo pipefail
ddprun=$1 canary=$2 kind=$3 pattern=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
  export $v="${!v:-}:halt_on_error=1:exitcode=86:log_path=$dir/report"
done
"$ddprun" --nproc-per-node 2 --standalone "$canary" "$kind"
rc=$?
echo "canary_test: ddprun exited $rc; reports: $(ls "$dir")"
[ "$rc" = 86 ] || { echo "canary_test: expected exit 86"; exit 1; }
grep -l -- "$pattern" "$dir"/report.* || { echo "canary_test: no report matching '$pattern'"; cat "$dir"/report.* 2>/dev/null; exit 1; }
exit 0
