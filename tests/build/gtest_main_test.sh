#!/usr/bin/env bash
# What ctest did per gtest case, now that a suite's cases run in one process (tests/support/gtest_main.cpp,
# tests/discover_suites.cmake):
#  1. each case has its own deadline (DDP_TEST_CASE_TIMEOUT): two cases of 1.2 s pass under a deadline of 2 s; a
#     case that hangs is named and the process exits 124 at its deadline; a deadline that is not a number exits 2;
#  2. a skipped case makes the process exit 77 (ctest: skipped), a failure wins over a skip (exit 1);
#  3. the discovery writes one entry per suite, `--gtest_filter=Suite.*`, its timeout every case's deadline, and
#     fails naming both binaries when two hold a suite of one name.
# usage: gtest_main_test.sh PROBE
set -uo pipefail
probe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # WANT_RC FILTER [VAR=VALUE...]: runs the probe, its output in $work/out
  local want=$1 filter=$2 rc=0
  shift 2
  env "$@" "$probe" --gtest_filter="$filter" > "$work/out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$work/out"; fail "$filter with $*: exit $rc, want $want"; }
}

# 1. Deadlines.
run 0 'Probe.PassesAfterAWhile*' DDP_TEST_CASE_TIMEOUT=2
start=$SECONDS
run 124 'Probe.PassesAfterAWhile:Probe.Hangs' DDP_TEST_CASE_TIMEOUT=2
took=$((SECONDS - start))
grep -q '^\[ddp-test\] Probe.Hangs is still running after its 2 s (DDP_TEST_CASE_TIMEOUT' "$work/out" ||
  { cat "$work/out"; fail "the hanging case is not named"; }
[ "$took" -lt 20 ] || fail "the hang took $took s to end (deadline 2 s)"
run 2 'Probe.PassesAfterAWhile' DDP_TEST_CASE_TIMEOUT=soon
grep -q "DDP_TEST_CASE_TIMEOUT='soon' is not a positive number of seconds" "$work/out" || { cat "$work/out"; fail "no message"; }

# 2. Skips and failures.
run 77 'Probe.PassesAfterAWhile:Probe.Skips'
grep -q '^\[ddp-test\] 1 of 2 case(s) skipped' "$work/out" || { cat "$work/out"; fail "the skip is not said"; }
run 1 'Probe.Skips:Probe.Fails'
run 0 'Probe.PassesAfterAWhile'

# 3. The discovery.
discover() {  # BINARY: writes $work/suites.cmake; cmake's output in $work/out
  cmake -D TEST_BINARY="$1" -D OUT_FILE="$work/suites.cmake" -D NAMES_DIR="$work/names" -D WORKING_DIR="$work" \
    -D CASE_TIMEOUT=30 -D LABELS=build,unit -P "$here/../discover_suites.cmake" > "$work/out" 2>&1
}
discover "$probe" || { cat "$work/out"; fail "the discovery failed"; }
grep -qF "add_test([==[Probe]==] \"$probe\" [==[--gtest_filter=Probe.*]==])" "$work/suites.cmake" &&
  grep -qF 'TIMEOUT 150 LABELS "build;unit" SKIP_RETURN_CODE 77' "$work/suites.cmake" &&
  grep -qF 'DDP_TEST_CASE_TIMEOUT=30' "$work/suites.cmake" || { cat "$work/suites.cmake"; fail "the entry"; }
[ "$(grep -c '^add_test' "$work/suites.cmake")" = 1 ] || { cat "$work/suites.cmake"; fail "not one entry"; }
cp "$probe" "$work/other_probe"
! discover "$work/other_probe" || fail "a second binary with suite Probe was accepted"
tr -s ' \n' ' ' < "$work/out" | grep -q "test suite 'Probe' is in $work/other_probe and in $probe: rename one" ||
  { cat "$work/out"; fail "no clash message"; }  # (cmake folds the message's lines)
echo "gtest main: per-case deadlines, skips and failures, one entry per suite: as expected"
