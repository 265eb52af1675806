#!/usr/bin/env bash
# A rank SIGKILLed in the middle of training under ddprun --max-restarts: ddprun
# stops the others, starts every rank again (TORCHELASTIC_RESTART_COUNT=1), the
# ranks resume from the latest checkpoint, and the final checkpoint equals an
# uninterrupted run's bit for bit. A fixed --master-port: rank 0's TCPStore
# must be able to listen on it again.
# usage: elastic_test.sh DDPRUN DDP_TRAIN NPROC [ddprun flags...]
set -euo pipefail
ddprun=$1 train=$2 np=$3
shift 3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
port=$(${DDP_PYTHON:-/usr/bin/python3} -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 8 --epochs 6 --data sampler --checkpoint-every 3)
"$ddprun" --nproc-per-node "$np" --master-port "$port" "$@" "$train" "${args[@]}" --out-dir "$work/whole" \
  > "$work/whole.log" 2>&1 || { cat "$work/whole.log"; fail "the uninterrupted run"; }
"$ddprun" --nproc-per-node "$np" --master-port "$port" --max-restarts 3 --monitor-interval 0.1 "$@" \
  "$train" "${args[@]}" --out-dir "$work/parts" > "$work/log" 2>&1 &
launcher=$!
for _ in $(seq 900); do grep -q "epoch 3/6" "$work/log" && break; sleep 0.1; done
grep -q "epoch 3/6" "$work/log" || { kill -KILL $launcher; cat "$work/log"; fail "no 'epoch 3/6' line within 90 s"; }
# The victim: the last rank, found among ddprun's descendants (mpirun's children) by RANK / OMPI_COMM_WORLD_RANK.
# Each environment is read whole first: under pipefail, `tr | grep -q` fails when grep exits on a match before
# tr has written the rest (SIGPIPE), which an mpi rank's long environment made happen in a CI run.
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
victim=
for pid in $(descendants $launcher); do
  environment=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null || true)
  if grep -qxE "(RANK|OMPI_COMM_WORLD_RANK)=$((np - 1))" <<< "$environment"; then
    victim=$pid
  fi
done
if [ -z "$victim" ]; then
  ps -o pid,ppid,stat,args --forest -g "$(ps -o sid= -p $launcher | tr -d ' ')" || true
  kill -KILL $launcher; cat "$work/log"; fail "rank $((np - 1)) not found under ddprun"
fi
kill -KILL "$victim"
rc=0
wait $launcher || rc=$?
[ $rc = 0 ] || { cat "$work/log"; fail "ddprun exited with $rc"; }
grep -q "was killed by signal 9 (SIGKILL)" "$work/log" || { cat "$work/log"; fail "the summary did not name the SIGKILL"; }
grep -q "restarting every rank (restart 1 of 3, --max-restarts 3)" "$work/log" || { cat "$work/log"; fail "no restart"; }
grep -q "restart 2 of 3" "$work/log" && { cat "$work/log"; fail "restarted twice"; }
grep -q "attempt 1 succeeded after 1 restart" "$work/log" || { cat "$work/log"; fail "attempt 1 did not succeed"; }
grep -q "resumed from" "$work/log" || { cat "$work/log"; fail "the restarted ranks did not resume"; }
grep "resumed from" "$work/log" | head -n1
${DDP_PYTHON:-/usr/bin/python3} "$here/same_weights.py" "$(latest "$work/whole")" "$(latest "$work/parts")" 6 \
  "after the restart"
echo "elastic_test: rank $((np - 1)) (pid $victim) killed, restarted, resumed, equal"
