#!/usr/bin/env bash
# ddprun's default --backend auto: ddprun's first line and ddp-train's first line
# name the backend chosen and why. One node with mpirun: mpi; mpirun hidden from
# PATH: gloo; DDP_BACKEND=gloo inherited: gloo; a program without ddp: gloo.
# usage: auto_backend_test.sh DDPRUN DDP_TRAIN
set -euo pipefail
ddprun=$1 train=$2 recipe=fashion-mnist  # tiny generated data: starts in a fraction of the mlp's time
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
unset DDP_BACKEND DDP_BACKEND_REASON
small=(--epochs 1 --limit-train 64 --limit-test 32 --batch-size 16)
run() { "$ddprun" --nproc-per-node 2 --standalone "$@" "$train" $recipe "${data[@]}" "${small[@]}" \
          --no-progress --out-dir "$work/out" > "$work/log" 2>&1 || fail "ddprun exited with $?"; }
has() { grep -qE -- "$1" "$work/log" || fail "the output lacks: $1"; }
version=$(mpirun --version | sed -n 's/^mpirun (Open MPI) \([0-9.]*\).*/\1/p')
[ -n "$version" ] || { echo "FAIL: mpirun --version names no Open MPI version"; exit 1; }

run  # the default is auto
head -n1 "$work/log" | grep -qxF "ddprun: backend mpi (auto: one node, OpenMPI $version)" || fail "ddprun's first line"
has "^\[rank 0\] ddp-train fashion-mnist: 2 rank\(s\) on mpi \(auto: one node, OpenMPI $version\), "
has "^\[rank 0\] done: acc1"

run --backend auto
has "^ddprun: backend mpi \(auto: one node, OpenMPI $version\)$"

# No mpirun on PATH (ddp-train is given by its path; ddprun's own lookups use PATH).
PATH=/nonexistent run
has "^ddprun: backend gloo \(auto: mpirun not found on PATH "
has "^\[rank 0\] ddp-train fashion-mnist: 2 rank\(s\) on gloo \(auto: mpirun not found on PATH "

DDP_BACKEND=gloo run
has "^ddprun: backend gloo \(DDP_BACKEND=gloo in the environment\)$"
has "^\[rank 0\] ddp-train fashion-mnist: 2 rank\(s\) on gloo \(DDP_BACKEND=gloo in the environment\), "

run --backend gloo  # given: no line from ddprun, the reason still reaches the ranks
grep -q "^ddprun: backend" "$work/log" && fail "a line about a backend that was given"
has "^\[rank 0\] ddp-train fashion-mnist: 2 rank\(s\) on gloo \(--backend gloo\), "

# Alone, without a launcher: the local backend of a world of one.
"$train" $recipe "${data[@]}" "${small[@]}" --no-progress --out-dir "$work/alone" > "$work/log" 2>&1 ||
  fail "ddp-train alone"
has "^ddp-train fashion-mnist: 1 rank\(s\) on local \(auto: a world of one without a launcher\), "
echo "auto_backend_test: mpi on one node (OpenMPI $version), gloo otherwise, each named with its reason"
