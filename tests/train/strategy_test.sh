#!/usr/bin/env bash
# A sharded strategy reaches the weights and the optimizer state of --strategy ddp:
#   zero1: bit for bit (the same averaged gradients, each parameter stepped by its
#   owner with the same elementwise update, then broadcast);
#   fsdp-full, fsdp-grad: each rank steps its rows of each parameter after a reduce-scatter,
#   which may sum the W terms in another order than all_reduce (W - 1 roundings), and
#   with --accumulate reduces each micro-batch (one more rounding per micro-batch).
#   So each step may differ in the last bits: 8 float32 ulps of each tensor's largest
#   value per step, summed over the steps. (Settings whose training amplifies rounding,
#   as lr 0.1 with momentum 0.9, are not for this comparison.)
# Checkpoints hold the whole state either way: each run's epoch-1 checkpoint (what --stop-after 1 leaves: the same
# save, then the stop) resumed under the other strategy ends where the uninterrupted ddp run does.
# usage: strategy_test.sh DDPRUN DDP_TRAIN RECIPE NPROC STRATEGY [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4 strategy=$5
shift 5
source "$(dirname "$0")/lib.sh"
run() { "$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 2 --no-progress "$@"; }
# Each log is written whole before it is searched (a pipe into grep -q would close under a run still writing).
run --out-dir "$work/ddp" --strategy ddp "$@" > "$work/ddp.log"
grep -q ", strategy ddp," "$work/ddp.log" || { echo "FAIL: ddp not named"; exit 1; }
run --out-dir "$work/s" --strategy "$strategy" "$@" > "$work/s.log"
grep -q ", strategy $strategy," "$work/s.log" || { echo "FAIL: $strategy not named"; exit 1; }
across() {  # FROM OUT STRATEGY FLAGS...: FROM's epoch-1 checkpoint, resumed in OUT under STRATEGY
  local from=$1 out=$2 name
  name=$(cd "$from/checkpoints" && ls | grep -E '^checkpoint-e0*1-s[0-9]+\.pt$' | tail -1)
  [ -n "$name" ] || { ls "$from/checkpoints"; echo "FAIL: no epoch-1 checkpoint in $from"; exit 1; }
  mkdir -p "$out/checkpoints"
  cp "$from/checkpoints/$name" "$out/checkpoints/" && echo "$name" > "$out/checkpoints/latest"
  run --out-dir "$out" --strategy "$3" --resume "${@:4}" > "$out.log"
  grep -q "resum.*$name\|$name.*resum" "$out.log" || { cat "$out.log"; echo "FAIL: $out did not resume from $name"; exit 1; }
}
across "$work/s" "$work/s-ddp" ddp "$@"
across "$work/ddp" "$work/ddp-s" "$strategy" "$@"
${DDP_PYTHON:-/usr/bin/python3} - "$strategy" "$(latest "$work/ddp")" "$(latest "$work/s")" "$(latest "$work/s-ddp")" \
  "$(latest "$work/ddp-s")" <<'PY'
import sys, torch
strategy = sys.argv[1]
ref = torch.load(sys.argv[2])
assert ref["epoch"] == 2 and ref["step"] > 0, (ref["epoch"], ref["step"])
ulps = 0 if strategy == "zero1" else 8 * ref["step"]
# The ulps are of the scale a value's rounding errors come from: a weight's own largest value; for optimizer
# state (gradients summed over steps), the largest of that state over the whole model, since a gradient's
# rounding is relative to the terms summed, not to their sum: a bias before BatchNorm has a gradient that
# cancels to ~1e-9, rounded at the scale of its layer's other gradients.
def same(a, b, where, scale=None):
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            print("FAIL:", where, "is", b.dtype, list(b.shape), "not", a.dtype, list(a.shape))
            sys.exit(1)
        if scale is None and a.is_floating_point() and a.numel():
            scale = a.abs().max().item()
        tol = ulps * torch.finfo(a.dtype).eps * scale if a.is_floating_point() and a.numel() else 0
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0
        if not (torch.equal(a, b) or (tol > 0 and diff <= tol)):
            print("FAIL:", where, "differs by", diff, "tolerance", tol)
            sys.exit(1)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (where, sorted(a.keys()), sorted(b.keys()))
        for k in a:
            same(a[k], b[k], where + "/" + str(k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, where + "/" + str(i))
    else:
        assert a == b, (where, a, b)
states = 0
for path in sys.argv[3:]:
    c = torch.load(path)
    assert c["step"] == ref["step"], (path, c["step"], ref["step"])
    same(ref["model"], c["model"], path + " model")
    ra, ca = ref["optimizer"]["state"], c["optimizer"]["state"]
    assert ra.keys() == ca.keys(), (path, sorted(ra.keys()), sorted(ca.keys()))
    scales = {}
    for st in ra.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
                scales[k] = max(scales.get(k, 0.0), v.abs().max().item())
    for i in ra:
        assert ra[i].keys() == ca[i].keys(), (path, i, sorted(ra[i].keys()), sorted(ca[i].keys()))
        for k in ra[i]:
            same(ra[i][k], ca[i][k], path + " optimizer state/" + str(i) + "/" + k, scales.get(k))
    same(ref["optimizer"]["param_groups"], c["optimizer"]["param_groups"], path + " param groups")
    states = len(c["optimizer"]["state"])
print(strategy + ", and resumes across strategies, equal ddp" + (f" within {ulps} ulps" if ulps else " bit for bit") + ":", len(ref["model"]), "tensors,", states,
      "parameters' optimizer state, step", ref["step"])
PY
case $strategy/$recipe in fsdp-*/mlp)
  # What FSDP cannot shard is refused before any step, saying what to use instead; a non-finite
  # gradient in any rank's rows stops every rank at the same step, naming it.
  refused() {
    local want=$1 out
    shift
    if out=$("$ddprun" --nproc-per-node "$np" --standalone "$train" "$@" --strategy "$strategy" --epochs 1 \
        --no-progress --out-dir "$work/refused" 2>&1); then echo "FAIL: $* ran"; exit 1; fi
    grep -qF -- "$want" <<<"$out" || { echo "$out"; echo "FAIL: no '$want'"; exit 1; }
  }
  refused "recipe keeps a weight average (EMA) of the whole model" fashion-mnist-fast --data-dir "$work/data/fashion"
  refused "a comm hook compresses DDP's all_reduce" mlp --comm-hook fp16
  refused "the gradients are not finite at epoch 1, step 2 (this rank's loss nan); first non-finite gradient: a gradient of '" \
    mlp --lr 1e38 --limit-train $((np * 192)) --batch-size 64
  echo "$strategy refuses what it cannot shard, and stops at a non-finite gradient"
esac
