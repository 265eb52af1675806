#!/usr/bin/env bash
# nccl at world 2 on one GPU (each rank its own NCCL host: own_host.sh): a sum, then the faults of
# docs/reliability.md's probe over nccl: a SIGKILLed rank and a SIGSTOPped one are the root cause, within a
# deadline (the store's heartbeat ends the survivor, whose host thread may be waiting on the GPU).
# Exits 77 (skipped) where nccl cannot run (no GPU). BACKEND (default nccl) gloo runs the same steps on the CPU
# (ctest one_gpu_faults_script_gloo): the script's own checks proven where no GPU is.
# usage: nccl_one_gpu_test.sh BIN_DIR [BACKEND]
set -uo pipefail
bin=$1 backend=${2:-nccl} here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp) fails=0
trap 'rm -f "$log"' EXIT
export OMP_NUM_THREADS=1 DDP_TIMEOUT=300
# run DEADLINE_S ARGS...: ddprun at world 2 over $backend, its output in $log; sets rc and secs.
run() {
  local deadline=$1 t0
  shift
  t0=$(date +%s)
  timeout "$deadline" "$bin/ddprun" --nproc-per-node 2 --standalone --backend "$backend" "$@" > "$log" 2>&1
  rc=$? secs=$(( $(date +%s) - t0 ))
}
expect() {  # expect WHAT TEXT: $log has TEXT
  grep -qF -- "$2" "$log" && return 0
  echo "FAIL ($1): no '$2' in:"; sed 's/^/  | /' "$log"; fails=$((fails + 1))
}
run 120 "$here/own_host.sh" "$bin/dist_probe" sum
grep -q "is built but cannot run here" "$log" && { echo "skipped: $(grep -m1 'cannot run here' "$log")"; exit 77; }
[ "$rc" = 0 ] || { echo "FAIL (sum): exit $rc"; sed 's/^/  | /' "$log"; exit 1; }
# Each rank's line, as ddprun prefixes it.
grep -qx '\[rank 0\] sum=3' "$log" && grep -qx '\[rank 1\] sum=3' "$log" ||
  { echo "FAIL (sum): not sum=3 on both ranks"; sed 's/^/  | /' "$log"; exit 1; }
echo "sum: both ranks 3, ${secs} s"
# The last rank SIGKILLs itself among large all_reduces (a hang would run to the 60 s deadline: 124).
run 60 --kill-grace 10 --heartbeat-timeout 3 "$here/own_host.sh" "$bin/dist_probe" kill
[ "$rc" != 0 ] && [ "$rc" != 124 ] || { echo "FAIL (kill): exit $rc"; fails=$((fails + 1)); }
expect kill "root cause: rank 1"
expect kill "SIGKILL"
echo "kill: exit $rc in ${secs} s: $(grep -m1 'root cause' "$log" | cut -c1-160)"
# Rank 1 SIGSTOPs itself; rank 0 all_reduces until its heartbeat (3 s) ends it.
run 60 --heartbeat-timeout 3 "$here/own_host.sh" "$bin/dist_probe" stop 1
[ "$rc" = 1 ] || { echo "FAIL (stop): exit $rc, expected 1"; fails=$((fails + 1)); }
expect stop "root cause: rank 1"
expect stop "stopped"
echo "stop: exit $rc in ${secs} s: $(grep -m1 'root cause' "$log" | cut -c1-160)"
[ "$fails" = 0 ]
