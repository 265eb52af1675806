#!/usr/bin/env bash
# Ranks started with different flags (here --batch-size, by $RANK, through a
# wrapper) fail at start on every rank, naming the option, the values and the
# ranks, instead of meeting in collectives of different sizes (gloo aborts).
# The same run with one batch size for all trains (exit 0).
# usage: config_agreement_test.sh DDPRUN DDP_TRAIN
set -euo pipefail
ddprun=$1 train=$2 recipe=mlp
source "$(dirname "$0")/lib.sh"
cat > "$work/wrapper.sh" <<SH
#!/bin/sh
# rank 0: 16 per rank; others: 8 (or the SAME_BATCH value for every rank)
b=\${SAME_BATCH:-\$([ "\$RANK" = 0 ] && echo 16 || echo 8)}
exec "$train" mlp --epochs 1 --limit-train 128 --limit-test 64 --no-progress --out-dir "$work/out" --batch-size \$b
SH
chmod +x "$work/wrapper.sh"
for np in 2 3; do
  set +e
  timeout 120 "$ddprun" --nproc-per-node $np --standalone "$work/wrapper.sh" > "$work/log" 2>&1
  rc=$?
  set -e
  others=1; [ $np = 3 ] && others="1, 2"
  ranks="rank"; [ $np = 3 ] && ranks="ranks"
  want="ranks disagree on the configuration: --batch-size is 16 on rank 0 but 8 on $ranks $others"
  grep -q -- "--out-dir is" "$work/log" && { echo "FAIL np=$np: only --batch-size differs"; exit 1; }
  [ $rc = 2 ] || { echo "FAIL np=$np: exit $rc (expected 2)"; cat "$work/log"; exit 1; }
  grep -qF "[rank 0] ddp-train: rank 0: $want" "$work/log" ||
    { echo "FAIL np=$np: message missing"; cat "$work/log"; exit 1; }
  ! grep -q EnforceNotMet "$work/log" || { echo "FAIL np=$np: gloo aborted"; exit 1; }
done
SAME_BATCH=8 timeout 300 "$ddprun" --nproc-per-node 2 --standalone "$work/wrapper.sh" > "$work/log" 2>&1 ||
  { echo "FAIL: the same flags on every rank should train"; cat "$work/log"; exit 1; }
echo "config agreement ok"
