#!/bin/sh
# Checks examples/hello:
#   hello_check.sh ranks DDPRUN HELLO BACKEND NP   every rank prints "My rank is R, same as R", exit 0
#   hello_check.sh init-error DDPRUN HELLO         init errors: a message and exit code 1 (no abort),
#                                                  alone and under ddprun (whose summary shows the message)
#   hello_check.sh timeout DDPRUN HELLO            ddprun --timeout 1 ends a rendezvous that cannot succeed in ~1 s
set -u
mode=$1 ddprun=$2 hello=$3
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT DDP_BACKEND DDP_TIMEOUT TORCHELASTIC_ERROR_FILE
case $mode in
  ranks)
    backend=$4 np=$5
    "$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$hello" >"$out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "ddprun exited with $rc"
    r=0
    while [ $r -lt "$np" ]; do
      [ "$(grep -c "^\[rank $r\] My rank is $r, same as $r\$" "$out")" -eq 1 ] || fail "rank $r did not print its own rank once"
      r=$((r + 1))
    done
    [ "$(grep -c 'My rank is' "$out")" -eq "$np" ] || fail "expected $np lines"
    ;;
  init-error)
    # Alone: a world of 2 without MASTER_ADDR.
    WORLD_SIZE=2 RANK=0 "$hello" >"$out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "hello exited with $rc, expected 1"
    grep -qx 'hello: rank 0: \[init\] env:// needs MASTER_ADDR for a world of 2 (ddprun and torchrun set it)' "$out" ||
      fail "message missing"
    # Under ddprun: a bad DDP_TIMEOUT fails every rank's init.
    DDP_TIMEOUT=abc "$ddprun" --nproc-per-node 2 --standalone --backend gloo "$hello" >"$out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "ddprun exited with $rc, expected 1"
    grep -q "^ddprun: root cause: rank [01] (pid [0-9]*) reported the first error, at " "$out" || fail "no root cause"
    grep -qx "ddprun:   | \[init\] DDP_TIMEOUT='abc' must be a positive number of seconds (at most 1e7)" "$out" || fail "message missing"
    grep -q "core dumped\|Aborted\|terminate called" "$out" && fail "aborted"
    ;;
  timeout)
    # ddprun --timeout reaches the ranks (DDP_TIMEOUT): rank 1 of a 2-node job whose node 0 never
    # comes gives up after 1 s instead of the default 600 s.
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    start=$(date +%s)
    "$ddprun" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" --timeout 1 "$hello" >"$out" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    [ $rc -eq 1 ] || fail "ddprun exited with $rc, expected 1"
    [ $took -lt 30 ] || fail "took $took s (10x headroom over ~2 s)"
    grep -q "^ddprun:   | .*within 1 s" "$out" || fail "the root cause does not show the 1 s timeout"
    ;;
  *) echo "usage: $0 ranks|init-error|timeout ..."; exit 2 ;;
esac
echo PASS
