#!/usr/bin/env bash
# imagefolder-RECIPE learns an easy generated 10-class task from a folder of
# JPEGs and PNGs under ddprun: top-1 well above chance (0.1) after a few epochs
# at a small image size, acc1/acc5 and lr in metrics.jsonl and TensorBoard. Then
# the errors of a folder without val/ and of a class without images.
# usage: imagefolder_test.sh DDPRUN DDP_TRAIN RECIPE NPROC MIN_ACC1_PERCENT [extra ddp-train flags...]
set -euo pipefail
ddprun=$1 train=$2 recipe=$3 np=$4 min_acc=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${DDP_PYTHON:-/usr/bin/python3} "$here/../data/make_image_folder.py" "$work/data" --classes 10 --train 24 --val 6
"$ddprun" --nproc-per-node "$np" --standalone "$train" "$recipe" --data-dir "$work/data" --image-size 32 \
  --out-dir "$work/out" --no-progress "$@" | tee "$work/log"
grep -qE "^\[rank 0\] ddp-train $recipe: .* 240 training samples \(sampler\), 60 test samples" "$work/log" ||
  { echo "FAIL: not the 240/60 generated images"; exit 1; }
acc=$(sed -nE 's/^\[rank 0\] done: acc1 ([0-9.]+)% on 60 test samples.*/\1/p' "$work/log")  # exact evaluation: all 60
[ -n "$acc" ] || { echo "FAIL: no final line"; exit 1; }
${DDP_PYTHON:-/usr/bin/python3} -c "import sys; a=float('$acc'); print('final acc1', a, '(needs >= $min_acc)'); sys.exit(0 if a >= $min_acc else 1)" ||
  { echo "FAIL: did not learn"; exit 1; }
ls "$work"/out/tb/events.out.tfevents.* > /dev/null
${DDP_PYTHON:-/usr/bin/python3} - "$work/out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = set().union(*(r.keys() for r in rows))
for k in ("acc1/val", "acc5/val", "lr"):
    assert any(k in r for r in rows), (k, sorted(keys))
evals = [r for r in rows if "acc5/val" in r]
print("metrics ok:", len(rows), "rows,", len(evals), "evaluations")
PY
# The checkpoint is torchvision's architecture: its weights load strictly into torchvision.models.<arch>.
ckpt=$(cat "$work/out/checkpoints/latest"); case $ckpt in /*) ;; *) ckpt="$work/out/checkpoints/$ckpt" ;; esac
${DDP_PYTHON:-/usr/bin/python3} - "$ckpt" "${recipe#imagefolder-}" <<'PY'
import sys, torch, torchvision
model = getattr(torchvision.models, sys.argv[2])(num_classes=10)
model.load_state_dict(torch.load(sys.argv[1])["model"], strict=True)
print("checkpoint loads into torchvision.models.%s" % sys.argv[2])
PY
# A folder without val/: the message says what is expected; exit code 1, not a hang.
mkdir -p "$work/noval" && cp -r "$work/data/train" "$work/noval/train"
if "$train" "$recipe" --data-dir "$work/noval" --image-size 32 --out-dir "$work/o2" --no-progress > "$work/e1" 2>&1; then
  echo "FAIL: no val/ accepted"; exit 1
fi
grep -q "$work/noval: no val/ subfolder (--data-dir); expected ImageNet's layout: train/<class>/<images>" "$work/e1" ||
  { cat "$work/e1"; echo "FAIL: message"; exit 1; }
# An empty class directory is named.
mkdir -p "$work/data/val/class_zz" "$work/data/train/class_zz"
if "$train" "$recipe" --data-dir "$work/data" --image-size 32 --out-dir "$work/o3" --no-progress > "$work/e2" 2>&1; then
  echo "FAIL: empty class accepted"; exit 1
fi
grep -q "class 'class_zz' has no image" "$work/e2" || { cat "$work/e2"; echo "FAIL: message"; exit 1; }
echo "imagefolder test ok"
