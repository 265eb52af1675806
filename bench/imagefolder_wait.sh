#!/usr/bin/env bash
# Does image loading stall training? imagefolder-resnet18 on generated ImageNet-sized JPEGs/PNGs
# (sides 300-500 px) with a timeline; prints each configuration's share of training time spent in
# the data track's "data wait" (the loader's next()) and samples/s.
#   bench/imagefolder_wait.sh [BUILD_BIN] [IMAGE_SIZE] [EPOCHS] [PRECISION]
# Configurations: world 1 and 2 (1 compute thread per rank), --workers 1 and 2 decoding threads per rank.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/bin}
size=${2:-128}
epochs=${3:-2}
precision=${4:-auto}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${DDP_PYTHON:-/usr/bin/python3} "$here/../tests/data/make_image_folder.py" "$tmp/data" --train 64 --val 8 --sizes 300,500 >/dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; image size $size, $epochs epochs, precision $precision"
echo "| world | workers/rank | data wait / train time | samples/s |"
echo "|---|---|---|---|"
for world in 1 2; do
  for workers in 1 2; do
    out=$tmp/run-$world-$workers
    OMP_NUM_THREADS=1 "$bin/ddprun" --nproc-per-node "$world" --standalone "$bin/ddp-train" imagefolder-resnet18 \
      --data-dir "$tmp/data" --image-size "$size" --epochs "$epochs" --batch-size 32 --workers "$workers" \
      --out-dir "$out" --timeline "$out/timeline.json" --no-progress --precision "$precision" >"$out.log" 2>&1 \
      || { cat "$out.log"; exit 1; }
    ${DDP_PYTHON:-/usr/bin/python3} - "$out/timeline.json" "$out/metrics.jsonl" "$world" "$workers" <<'PY'
import json, sys
trace, metrics, world, workers = sys.argv[1:]
events = json.load(open(trace))
events = events["traceEvents"] if isinstance(events, dict) else events
wait = sum(e.get("dur", 0) for e in events if e.get("name") == "data wait" and e.get("ph") == "X")
train = sum(e.get("dur", 0) for e in events if e.get("name") in ("data wait", "forward", "backward", "optimizer step") and e.get("ph") == "X")
rates = [json.loads(l)["throughput"] for l in open(metrics) if '"kind":"epoch"' in l]
print("| %s | %s | %.1f%% | %.1f |" % (world, workers, 100.0 * wait / train, rates[-1]))
PY
  done
done
