#!/usr/bin/env bash
# suite_mp has its own main (it registers the suites' cases on its group) and keeps the per-case deadline of every
# gtest main (support/case_deadline.h): under DDP_TEST_CASE_TIMEOUT=0.01 s, far below what most of the suite's cases
# take (DDP's train a model: 50 ms and more), the first case to outlast it is named on stderr, and the rank, then
# ddprun, exit 124 within seconds (not at the ctest entry's 60).
# usage: suite_mp_deadline_test.sh DDPRUN SUITE_MP
set -uo pipefail
ddprun=$1 suite=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { cat "$out"; echo "FAIL: $*"; exit 1; }
start=$SECONDS
rc=0
DDP_TEST_CASE_TIMEOUT=0.01 "$ddprun" --nproc-per-node 1 --standalone --backend gloo "$suite" --gtest_brief=1 \
  > "$out" 2>&1 || rc=$?
took=$((SECONDS - start))
[ "$rc" = 124 ] || fail "exit $rc, want 124 (a case past its deadline)"
grep -q '\[ddp-test\] Suite_gloo_w1\.[A-Za-z0-9_/]* is still running after its 0.01 s (DDP_TEST_CASE_TIMEOUT' "$out" ||
  fail "the case past its deadline is not named"
[ "$took" -lt 30 ] || fail "the deadline took $took s to end the run"
echo "suite_mp: a case past DDP_TEST_CASE_TIMEOUT is named and ends the run (exit 124)"
