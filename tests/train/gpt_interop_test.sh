#!/usr/bin/env bash
# PyTorch's nanoGPT (bench/nanogpt/nanogpt.py: nanoGPT's model.py, ddp's parameter names) on the weights a
# shakespeare-char run trained (world NP, float32) finds the validation loss ddp-train reported for them: the same
# model and the same windows. Tolerance: each logit is a float32 sum of 128 to 512 products, through 4 blocks in
# another order of operations (PyTorch's kernels, maybe another BLAS): a few 1e-6 relative; 1e-4 of the loss.
# usage: gpt_interop_test.sh DDPRUN DDP_TRAIN NP
set -euo pipefail
ddprun=$1 train=$2 np=$3 recipe=shakespeare-char
source "$(dirname "$0")/lib.sh"
"$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" "${data[@]}" --epochs 1 --limit-train 96 \
  --batch-size 4 --precision fp32 --no-progress --out-dir "$work/out" > "$work/log"
python=${DDP_PYTHON:-/usr/bin/python3}
"$python" "$here/../../bench/nanogpt/nanogpt.py" eval "${data[1]}" "$(latest "$work/out")" > "$work/peer.json"
"$python" - "$work/out/metrics.jsonl" "$work/peer.json" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"epoch"' in l][-1]["Loss/val"]
peer = json.load(open(sys.argv[2]))["val_loss"]
print("validation loss: ddp-train", ours, "PyTorch's nanoGPT", peer)
assert abs(ours - peer) <= 1e-4 * abs(peer), (ours, peer)
PY
