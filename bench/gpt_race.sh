#!/usr/bin/env bash
# The race of issue 46: ddp-train shakespeare-char against nanoGPT's training in PyTorch (bench/nanogpt/nanogpt.py,
# the same model, data, optimizer and schedule), on this machine in one run, at world 1 and at world 2 (DDP over
# gloo: ddprun and torchrun, one thread a rank). For each: the seconds to a validation loss of 1.90 (the first
# evaluation at or below it; evaluations every 250 iterations over the same 1,742 windows, their time included)
# and the training tokens per second (over the training time, evaluations left out). nanoGPT runs in float32 on a CPU (its train.py has no CPU autocast); ddp's
# recipe takes bf16 where the CPU has it natively. Both precisions of both are run, so that the table says which
# part of the lead is the precision's. Rows in the order run, each peer right after ddp.
# usage: [PRECISIONS="bf16 fp32"] bench/gpt_race.sh [BUILD_DIR [DATA_DIR [WORLDS]]]   (BUILD_DIR with the venv of
# torch 2.x: build-torch2)
set -euo pipefail
build=${1:-build-torch2} data=${2:-../shared/data/tinyshakespeare} worlds=${3:-"1 2"}
out=${OUT:-/tmp/gpt_race} target=1.90
python=${DDP_PYTHON:-$build/venv/bin/python}
rm -rf "$out" && mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
ddp() {  # NP PRECISION
  local name="ddp-w$1-$2"
  OMP_NUM_THREADS=$((2 / $1)) "$build/bin/ddprun" --nproc-per-node "$1" --standalone "$build/bin/ddp-train" \
    shakespeare-char --data-dir "$data" --precision "$2" --backend gloo --no-progress --out-dir "$out/$name" \
    > "$out/$name.log" 2>&1
  "$python" - "$out/$name/metrics.jsonl" "$name" "$target" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
evals = [r for r in recs if r["kind"] in ("eval", "epoch")]
hit = next((r for r in evals if r["Loss/val"] <= float(sys.argv[3])), None)
tp = [r for r in recs if r["kind"] == "epoch"][-1]
world = int(sys.argv[2].split("-")[1][1:])
print(f"{sys.argv[2]:14s} to {sys.argv[3]}: {hit['wall_seconds'] if hit else float('nan'):7.1f} s (step "
      f"{hit['step'] if hit else '-'}), final val {evals[-1]['Loss/val']:.4f}, "
      f"{tp['step'] * 12 * 64 * world / tp['train_seconds']:8.0f} training tokens/s")
PY
}
py() {  # NP PRECISION
  local name="torch-w$1-$2" run=("$python")
  [ "$1" -gt 1 ] && run=("$(dirname "$python")/torchrun" --nproc-per-node "$1" --standalone)
  OMP_NUM_THREADS=$((2 / $1)) "${run[@]}" "$here/nanogpt/nanogpt.py" train "$data" --dtype "$2" \
    --threads $((2 / $1)) > "$out/$name.jsonl" 2> "$out/$name.err"
  "$python" - "$out/$name.jsonl" "$name" "$target" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
hit = next((r for r in recs if r["val_loss"] <= float(sys.argv[3])), None)
last = recs[-1]
print(f"{sys.argv[2]:14s} to {sys.argv[3]}: {hit['seconds'] if hit else float('nan'):7.1f} s (step "
      f"{hit['iter'] if hit else '-'}), final val {last['val_loss']:.4f}, "
      f"{last['tokens'] / last['train_seconds']:8.0f} training tokens/s")
PY
}
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; torch $("$python" -c 'import torch; print(torch.__version__)')"
for w in $worlds; do
  for p in ${PRECISIONS:-bf16 fp32}; do
    ddp "$w" "$p"
    py "$w" "$p"
  done
done
