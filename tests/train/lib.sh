# Shared by the ddp-train test scripts (sourced): tiny data in a temporary
# folder, the recipe's --data-dir, and the newest checkpoint of a run.
# Expects $recipe; sets $work (removed at exit), $here and the array $data.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${DDP_PYTHON:-/usr/bin/python3} "$here/make_tiny_data.py" "$work/data"
case $recipe in
  fashion-mnist|fashion-mnist-fast) data=(--data-dir "$work/data/fashion") ;;
  cifar10-*) data=(--data-dir "$work/data/cifar10") ;;
  shakespeare-char*) data=(--data-dir "$work/data/tinyshakespeare") ;;
  *) data=() ;;
esac
# DATA_VIA_ENV=1: no --data-dir; the recipe finds $DDP_DATA_DIR/<dataset> instead.
if [ "${DATA_VIA_ENV:-0}" = 1 ] && [ ${#data[@]} -gt 0 ]; then
  ln -s fashion "$work/data/fashion-mnist"
  export DDP_DATA_DIR="$work/data"
  data=()
fi
# steps_per_epoch GLOBAL_BATCH: the tiny Fashion-MNIST train set's size (its idx header) over the global batch;
# fails unless it divides (every epoch then has as many steps, at any world that keeps the global batch).
steps_per_epoch() {
  local n
  n=$(zcat "$work/data/fashion/train-labels-idx1-ubyte.gz" | head -c 8 | od -An -j4 -tu1 |
    awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
  [ $((n % $1)) = 0 ] || { echo "FAIL: the test's $n samples are not a whole number of global batches of $1" >&2; return 1; }
  echo $((n / $1))
}
# latest OUT_DIR: the path of the newest checkpoint the run left.
latest() { local c; c=$(cat "$1/checkpoints/latest"); case $c in /*) echo "$c" ;; *) echo "$1/checkpoints/$c" ;; esac; }
# As a task that srun starts directly: no variable of another launcher.
unset_launcher_env() {
  local v
  for v in RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR MASTER_PORT DDP_BACKEND \
    OMPI_COMM_WORLD_SIZE PMI_SIZE PMIX_RANK; do unset "$v"; done
}
# kill_rank_in_epoch3 LAUNCHER LOG EPOCHS RANK: once LOG (ddprun's output) has "epoch 2/EPOCHS", 0.2 s into epoch 3,
# SIGKILLs the rank RANK among LAUNCHER's children; then waits for LAUNCHER and fails unless it exited 0.
kill_rank_in_epoch3() {
  local launcher=$1 log=$2 epochs=$3 rank=$4 pid rc=0
  for _ in $(seq 900); do grep -q "epoch 2/$epochs" "$log" && break; sleep 0.1; done
  grep -q "epoch 2/$epochs" "$log" || { kill -KILL "$launcher"; cat "$log"; echo "FAIL: no epoch 2 within 90 s"; exit 1; }
  sleep 0.2
  for pid in $(pgrep -P "$launcher"); do
    tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" | grep -qx "RANK=$rank" && kill -KILL "$pid"
  done
  wait "$launcher" || rc=$?
  [ $rc = 0 ] || { cat "$log"; echo "FAIL: ddprun exited with $rc"; exit 1; }
}
