#!/usr/bin/env bash
# ddprun --recovery inplace: ddp-train refuses, before training, a setting whose state would not survive a lost rank
# in place, naming it with the way out (check_recoverable, src/train/inplace.cpp); --nan-check-at next-step among
# them (the recovery adopts the last step's weights, whose check may not have been read yet). One rank.
# usage: inplace_refusals_test.sh DDPRUN DDP_TRAIN
set -euo pipefail
ddprun=$1 train=$2 recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
refused() {  # WANT FLAGS...: the run fails before training, saying WANT
  local want=$1 out rc=0
  shift
  rm -rf "$work/run"
  out=$(timeout 120 "$ddprun" --standalone --nproc-per-node 1 --recovery inplace "$train" "$recipe" "${data[@]}" \
    --epochs 1 --no-progress --out-dir "$work/run" "$@" 2>&1) || rc=$?
  case $rc in
    0) echo "$out"; echo "FAIL: $* ran"; exit 1 ;;
    124) echo "$out"; echo "FAIL: $* did not end within 120 s"; exit 1 ;;
  esac
  grep -qF -- "$want" <<<"$out" || { echo "$out"; echo "FAIL: no '$want'"; exit 1; }
  if grep -q "epoch 1/1" <<<"$out" || [ -d "$work/run/checkpoints" ]; then
    echo "$out"; echo "FAIL: $* trained before refusing"; exit 1
  fi
}
refused "--nan-check-at next-step (a step's weights are committed before its check is read; --nan-check-at step) cannot recover in place" \
  --nan-check-at next-step
refused "--strategy zero1 cannot recover in place" --strategy zero1
echo "--recovery inplace refuses --nan-check-at next-step and --strategy zero1, naming them"
