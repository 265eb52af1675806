#!/usr/bin/env bash
# A recipe trains one short epoch on tiny generated data under ddprun, then
# leaves its logs and a checkpoint that Python's torch.load reads.
# usage: recipe_test.sh DDPRUN DDP_TRAIN RECIPE NPROC [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4
shift 4
source "$(dirname "$0")/lib.sh"
"$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 1 \
  --out-dir "$work/out" --no-progress "$@" | tee "$work/log"
grep -qE "^\[rank 0\] done: (acc1|val_loss)" "$work/log" || { echo "FAIL: no final line"; exit 1; }
# The tiny data (192 Fashion-MNIST or 240 CIFAR-10 training images, or a limit of 32), not a real data set found elsewhere.
# shakespeare-char: the tiny text's last 10% (2,000 characters) is 31 windows of 64.
tiny="(192|240|32) training samples"
case $recipe in shakespeare-char) tiny="training samples \(sampler\), 31 test samples" ;; esac
[ "$recipe" = mlp ] || grep -qE "^\[rank 0\] ddp-train $recipe: .* $tiny" "$work/log" ||
  { echo "FAIL: the run did not train on the tiny data in ${DDP_DATA_DIR:-its --data-dir}"; exit 1; }
# The first line says which precision runs and why; the CIFAR-10 and Fashion-MNIST recipes choose it by the CPU.
want="(as asked|the recipe's default)"
case "$recipe $*" in *--precision*) ;; cifar10-*|fashion-mnist*|shakespeare-char*) want="auto: .+" ;; esac
grep -qE "^\[rank 0\] ddp-train $recipe: .*, (fp32|bf16) \($want\)\$" "$work/log" ||
  { echo "FAIL: the first line does not name the precision and why ($want)"; exit 1; }
grep -qE "^\[rank 0\]   cpu: .+ cores? \(" "$work/log" || { echo "FAIL: no cpu line"; exit 1; }
# --eval-every 1 (S steps): evaluations within the epoch after steps 1 to S-1, each a line and a metrics record.
case " $* " in *" --eval-every 1 "*)
  steps=$(sed -nE 's/^\[rank 0\] ddp-train .* ([0-9]+) steps per epoch.*/\1/p' "$work/log")
  [ "${steps:-0}" -ge 3 ] || { echo "FAIL: the test needs 3 steps or more, got '$steps'"; exit 1; }
  for s in $(seq 1 $((steps - 1))); do
    grep -qE "^\[rank 0\] step $s \(epoch 0\.[0-9]+\) \| val_loss [0-9.]+ \| acc1 [0-9.]+% .* s since the start\$" "$work/log" ||
      { echo "FAIL: no evaluation line after step $s"; exit 1; }
  done
  [ "$(grep -c '"kind":"eval"' "$work/out/metrics.jsonl")" = $((steps - 1)) ] ||
    { echo "FAIL: not $((steps - 1)) eval records"; exit 1; } ;;
esac
# shakespeare-char: text sampled from the checkpoint continues the prompt with 50 characters of the text's own.
case $recipe in shakespeare-char*)
  "$train" sample "$work/out" --prompt "Abc" --tokens 50 --seed 1 > "$work/sample"
  ${DDP_PYTHON:-/usr/bin/python3} - "$work/sample" "${data[1]}/input.txt" <<'PY'
import sys
out = open(sys.argv[1]).read()[:-1]  # without the line's end
vocab = set(open(sys.argv[2]).read())
assert out.startswith("Abc") and len(out) == 53 and set(out) <= vocab, repr(out)
print("sample ok:", repr(out))
PY
  ;;
esac
ls "$work"/out/tb/events.out.tfevents.* > /dev/null
test -s "$work/out/metrics.jsonl"
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/out")" <<'PY'
import sys, torch
c = torch.load(sys.argv[1])
assert c["epoch"] == 1 and c["step"] > 0, (c["epoch"], c["step"])
model = c["model"]
assert all(torch.is_tensor(v) for v in model.values()) and len(model) > 0
assert not any(k.startswith("module.") for k in model)
print("checkpoint ok:", len(model), "tensors, step", c["step"])
PY
