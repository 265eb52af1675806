#!/bin/bash
# ddprun --recovery inplace over inplace_probe: ranks killed (rank 0, the old store host, included), two at once,
# one after another, one while the others rebuild, one stopped past the heartbeat timeout, one while another is slow
# to come to the rebuild (alive: waited for past the heartbeat timeout); every survivor checks every step's sum against the
# members it has, and ends in the expected generation with the expected members. Then: no survivor at all fails
# the job; mpi and several nodes are refused.
# Usage: inplace_test.sh DDPRUN INPLACE_PROBE
set -u
ddprun=$1 probe=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
bad() { echo "FAIL: $*"; cat "$out"; fail=1; }

# case NP FAULTS GENERATION MEMBERS [ddprun flags...]: every member not in FAULTS ends with GENERATION, MEMBERS.
case_ok() {
  local np=$1 faults=$2 gen=$3 members=$4
  shift 4
  echo "--- np $np, faults $faults"
  timeout 120 "$ddprun" --standalone --nproc-per-node "$np" --recovery inplace "$@" "$probe" 40 "$faults" >"$out" 2>&1
  local rc=$?
  [ $rc = 0 ] || { bad "np $np faults $faults: ddprun exited $rc"; return; }
  local want=0 id
  for id in ${members//,/ }; do
    want=$((want + 1))
    grep -q "^\[rank $id\] member $id: 40 steps checked, generation $gen, members $members$" "$out" ||
      bad "np $np faults $faults: member $id did not end in generation $gen with members $members"
  done
  [ "$(grep -c 'steps checked' "$out")" = $want ] || bad "np $np faults $faults: not $want survivors"
  local lost
  for lost in $(echo "$faults" | tr ',' '\n' | grep -v ':slow$' | cut -d: -f1); do
    grep -q "^ddprun: rank $lost was lost (SIGKILL); the others go on (--recovery inplace)$" "$out" ||
      bad "np $np faults $faults: ddprun did not report rank $lost lost"
  done
  grep -q "^ddprun: lost rank(s) .* on the way; the other ranks ended normally (--recovery inplace)$" "$out" ||
    bad "np $np faults $faults: no closing line"
}

case_ok 2 1:3 1 0
case_ok 3 1:10 1 0,2
case_ok 4 2:10 1 0,1,3
case_ok 4 0:10 1 1,2,3
case_ok 4 0:8,2:8 1 1,3
case_ok 3 1:5,2:20 2 0
case_ok 4 3:4,0:12,1:30 3 2
case_ok 3 1:6:stop 1 0,2 --heartbeat-timeout 3
grep -q "rank 1 (pid [0-9]*) is still stopped after 3 s: killing it (SIGKILL)" "$out" || bad "stop: no kill line"
case_ok 4 1:10,2:0:rebuild 1 0,3  # rank 2 dies while the others rebuild after rank 1's loss
# Rank 2 sleeps 3 s (3 heartbeat timeouts) before step 10, where rank 1 dies: its pulse moves, so rank 0 waits.
case_ok 3 1:10,2:10:slow 1 0,2 --heartbeat-timeout 1
grep -q "^\[rank 2\] member 2: sleeps 3 s before step 10$" "$out" || bad "slow: rank 2 did not sleep"

echo "--- no survivor: the job fails"
timeout 120 "$ddprun" --standalone --nproc-per-node 2 --recovery inplace "$probe" 40 0:3,1:3 >"$out" 2>&1
rc=$?
[ $rc = 137 ] || bad "no survivor: ddprun exited $rc, expected 137 (the last rank's SIGKILL)"
grep -q "failure summary" "$out" || bad "no survivor: no failure summary"

echo "--- refused"
"$ddprun" --standalone --nproc-per-node 2 --recovery inplace --backend mpi "$probe" 4 0:1 >"$out" 2>&1
[ $? = 2 ] && grep -q "cannot be used with --backend mpi: OpenMPI's communicators cannot survive a lost rank" "$out" ||
  bad "--backend mpi not refused"
exit $fail
