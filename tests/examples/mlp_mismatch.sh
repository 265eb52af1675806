#!/bin/sh
# examples/mlp with a different --niters per rank (20 + 3 x rank), under ddprun: the ranks' collectives stop
# matching at #31 (rank 0's final loss all_reduce against rank 1's next gradient bucket). With the default call
# check every rank names the mismatch (each checked) and ddprun exits 1; no abort inside the backend, no hang.
#   mlp_mismatch.sh DDPRUN MLP BACKEND NP
set -u
ddprun=$1 mlp=$2 backend=$3 np=$4
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/out"; exit 1; }
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT DDP_BACKEND DDP_TIMEOUT DDP_DEBUG \
  TORCH_DISTRIBUTED_DEBUG TORCHELASTIC_ERROR_FILE
# mpirun sets no RANK: its ranks read OMPI_COMM_WORLD_RANK.
cat >"$dir/rank.sh" <<INNER
#!/bin/sh
exec "$mlp" --niters \$((20 + 3 * \${RANK:-\$OMPI_COMM_WORLD_RANK})) --train-size 2000
INNER
chmod +x "$dir/rank.sh"
DDP_TIMEOUT=120 "$ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$dir/rank.sh" >"$dir/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "ddprun exited with $rc, expected 1"
grep -q "terminate called\|EnforceNotMet" "$dir/out" && fail "a rank aborted"
expected="mlp: \[$backend\] rank 0/$np all_reduce: ranks disagree on collective #31: rank 0: #31 all_reduce float64\[2\] SUM; rank 1: #31 all_reduce float32\[401408\] SUM"
grep -q "$expected" "$dir/out" || fail "rank 0 did not name the mismatch"
# Every rank names it (under mpi, the first rank to exit waits DDP_EXIT_LINGER so that mpirun does not end the
# others before they print).
r=1
while [ $r -lt "$np" ]; do
  grep -q "^\[rank $r\] mlp: \[$backend\] rank $r/$np all_reduce: ranks disagree on collective #31: " "$dir/out" ||
    fail "rank $r did not name the mismatch"
  r=$((r + 1))
done
echo "PASS: $backend np$np: the mismatch named, exit 1"
