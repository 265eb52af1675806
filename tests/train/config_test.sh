#!/usr/bin/env bash
# ddp-train --print-config writes every setting, the recipe's defaults resolved
# for the launcher's world; --config FILE reads it back; flags win over the file.
# usage: config_test.sh DDP_TRAIN
set -euo pipefail
train=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
WORLD_SIZE=4 "$train" cifar10-resnet9 --print-config --optimizer adam --comm-hook bf16 --sync-bn > "$work/a.toml"
grep -qx 'batch-size = 128' "$work/a.toml" || { echo "FAIL: resnet9 at world 4 should default to 128 per rank"; exit 1; }
grep -qx 'lr = 0.001' "$work/a.toml" || { echo "FAIL: adam's default lr"; exit 1; }
grep -qx 'comm-hook = "bf16"' "$work/a.toml" || { echo "FAIL: comm-hook not printed"; exit 1; }
grep -qx 'sync-bn = true' "$work/a.toml" || { echo "FAIL: sync-bn not printed"; exit 1; }
! grep -q "recipe's default" "$work/a.toml" || { echo "FAIL: an unresolved setting"; exit 1; }
"$train" --config "$work/a.toml" --print-config > "$work/b.toml"
diff "$work/a.toml" "$work/b.toml" || { echo "FAIL: the printed config does not read back to itself"; exit 1; }
"$train" --config "$work/a.toml" --epochs 3 --print-config | grep -qx 'epochs = 3' ||
  { echo "FAIL: a flag should win over the file"; exit 1; }
# A bad key in the file is named, exit 2.
printf 'recipe = "mlp"\nepochz = 3\n' > "$work/bad.toml"
set +e
"$train" --config "$work/bad.toml" 2> "$work/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q epochz "$work/err" || { echo "FAIL: rc $rc, $(cat "$work/err")"; exit 1; }
# Before any group, an error names the launcher's rank: mpirun's OMPI_COMM_WORLD_RANK too (ddprun --backend mpi sets
# no RANK), not "rank 0" on every rank.
set +e
OMPI_COMM_WORLD_RANK=1 "$train" mlp --epochs 0 2> "$work/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -qx 'ddp-train: rank 1: --epochs must be positive, got 0' "$work/err" ||
  { echo "FAIL: rc $rc, $(cat "$work/err")"; exit 1; }
echo "config ok"
