#!/usr/bin/env bash
# Trainer::on_world_change under ddprun --recovery inplace: 3 ranks, rank 1 SIGKILLs itself after epoch 2; both
# survivors' callbacks are told "3 -> 2, generation 1" with the launch's global batch, and the lr_scale 0.5 they set
# halves the learning rate from the next step on (metrics.jsonl's train lr, a constant schedule).
# usage: world_change_test.sh DDPRUN WORLD_CHANGE_PROBE
set -euo pipefail
ddprun=$1 probe=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }
"$ddprun" --standalone --nproc-per-node 3 --recovery inplace "$probe" "$work/out" 1 > "$work/log" 2>&1 ||
  fail "ddprun exited with $?"
for r in 0 2; do
  grep -qE "^\[rank $r\] world change 3 -> 2, generation 1, at step [0-9]+, global batch [0-9]+$" "$work/log" ||
    fail "rank $r's callback was not told"
done
grep -c "world change" "$work/log" | grep -qx 2 || fail "not two callbacks"
${DDP_PYTHON:-/usr/bin/python3} - "$work/out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
change = next(i for i, r in enumerate(rows) if r.get("kind") == "world_change")
before = {r["lr"] for r in rows[:change] if r.get("kind") == "train" and "lr" in r}
after = {r["lr"] for r in rows[change:] if r.get("kind") == "train" and "lr" in r}
if len(before) != 1 or len(after) != 1 or after.pop() != before.pop() / 2:
    sys.exit("FAIL: lr before the change %s, after %s: not halved" % (sorted(before), sorted(after)))
print("the learning rate halved after the change of world, as the callback asked")
PY
