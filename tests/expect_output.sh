#!/usr/bin/env bash
# A test that needs both: COMMAND exits 0 and its output (stdout and stderr) matches REGEX (grep -E).
# ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status. Usage: expect_output.sh REGEX COMMAND [ARGS...]
set -uo pipefail
regex=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" > "$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: $1 exited with status $rc"
  exit 1
fi
if ! grep -Eq -- "$regex" "$out"; then
  echo "FAIL: $1 exited 0, but its output has no line matching: $regex"
  exit 1
fi
