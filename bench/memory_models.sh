#!/usr/bin/env bash
# Peak tensor memory per rank, from the allocator (ddp-train's "peak tensors", ddp/dist/tensor_memory.h), of the GPT
# recipe (shakespeare-char-gpu: nanoGPT's 10.7M-parameter model, AdamW) and a ResNet (cifar10-resnet18, 11.2M,
# SGD with momentum) at worlds 1-4 under ddp, zero1, fsdp-grad (ZeRO-2), fsdp-full (ZeRO-3) and hsdp (world 4:
# 2 replicas x 2 shards), against the model state a rank must hold at its peak:
#   ddp: P + G + O; zero1: P + G + O/W; fsdp-full, hsdp: (P + G + O)/S + R + 3 U; fsdp-grad: (P + G + O)/S + P + U
# with P the parameters (G their gradients, as many), O the optimizer state, S the ranks sharding, R the root
# unit's parameters (embeddings, the head: gathered for the whole step) and U the largest other unit (ZeRO-3:
# the running unit's parameters, the next one's prefetched, and the running unit's full gradient before its
# reduce-scatter; ZeRO-2: every unit's parameters stay gathered, and one unit's full gradient). float32, a few
# steps, small data: "rest" = peak - state is the activations, the batch and the collectives' buffers, which
# sharding does not change. REPORT_ONLY=1: the table from the last runs in $OUT.
# usage: bench/memory_models.sh [BUILD_DIR [SHAKESPEARE_DIR [CIFAR_DIR]]]
set -euo pipefail
build=${1:-build} text=${2:-../shared/data/tinyshakespeare} cifar=${3:-../shared/data/cifar10}
out=${OUT:-/tmp/memory_models}
python=${DDP_PYTHON:-/usr/bin/python3}
[ "${REPORT_ONLY:-0}" = 1 ] || rm -rf "$out" && mkdir -p "$out"
run() {  # RECIPE DATA BATCH WORLD STRATEGY [FLAGS...]
  local recipe=$1 data=$2 batch=$3 world=$4 strategy=$5
  shift 5
  local name="$recipe-w$world-$strategy"
  OMP_NUM_THREADS=1 "$build/bin/ddprun" --nproc-per-node "$world" --standalone "$build/bin/ddp-train" "$recipe" \
    --data-dir "$data" --backend gloo --precision fp32 --epochs 1 --batch-size "$batch" \
    --limit-train $((batch * world * 4)) --limit-test 8 --eval-every 0 --no-progress --strategy "$strategy" \
    --out-dir "$out/$name" "$@" > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
}
if [ "${REPORT_ONLY:-0}" != 1 ]; then
  for world in 1 2 3 4; do
    for strategy in ddp zero1 fsdp-grad fsdp-full; do
      run shakespeare-char-gpu "$text" 4 "$world" "$strategy"
      run cifar10-resnet18 "$cifar" 32 "$world" "$strategy"
    done
  done
  run shakespeare-char-gpu "$text" 4 4 hsdp --hsdp-shard-size 2
  run cifar10-resnet18 "$cifar" 32 4 hsdp --hsdp-shard-size 2
fi
"$python" - "$out" <<'PY'
import glob, json, os, re, sys
import torch
out = sys.argv[1]
def model_state(recipe):
    d = f"{out}/{recipe}-w1-ddp/checkpoints"
    ck = torch.load(os.path.join(d, open(d + "/latest").read().strip()))
    sd, opt = ck["model"], ck["optimizer"]["state"]
    units = {}
    for k, v in sd.items():
        if not v.is_floating_point() or "running_" in k: continue  # buffers: not parameters
        m = re.match(r"(h\d+|layer\d\.\d+)\.", k)
        units[m.group(1) if m else "root"] = units.get(m.group(1) if m else "root", 0) + v.numel() * 4
    p = sum(units.values())
    o = sum(t.numel() * 4 for s in opt.values() for n, t in s.items() if torch.is_tensor(t) and t.dim() > 0)
    root = units.pop("root", 0)
    return p, o, root, max(units.values())
print("| model | world | strategy | peak MB (ranks) | state MB | rest MB |")
print("|---|---|---|---|---|---|")
for recipe in ("shakespeare-char-gpu", "cifar10-resnet18"):
    p, o, r, u = model_state(recipe)
    for path in sorted(glob.glob(f"{out}/{recipe}-w*.log"), key=lambda f: (int(re.search(r"-w(\d)", f).group(1)), f)):
        w, strategy = re.search(r"-w(\d)-(.*)\.log$", path).groups()
        w = int(w)
        rec = [json.loads(l) for l in open(path[:-4] + "/metrics.jsonl")]
        ep = [x for x in rec if x["kind"] == "epoch"][-1]
        peaks = [ep[f"peak_tensor_mb_rank{i}"] for i in range(w)]
        s = 2 if strategy == "hsdp" else w
        state = {"ddp": 2 * p + o, "zero1": 2 * p + o / w, "fsdp-full": (2 * p + o) / s + r + 3 * u,
                 "hsdp": (2 * p + o) / s + r + 3 * u, "fsdp-grad": (2 * p + o) / s + p + u}[strategy] / 1e6
        print(f"| {recipe} | {w} | {strategy} | {max(peaks):.1f} ({', '.join(f'{x:.1f}' for x in peaks)}) | "
              f"{state:.1f} | {max(peaks) - state:.1f} |")
    print(f"<!-- {recipe}: P {p/1e6:.2f} MB, O {o/1e6:.2f} MB, root {r/1e6:.2f} MB, largest unit {u/1e6:.2f} MB -->")
PY
